import pytest

from inkling_probe.errors import SettingsError
from inkling_probe.settings import StepRange, from_env, make, parse_steps, parse_tokens


def test_unset_means_off():
    assert from_env({}) is None
    assert from_env({"INKLING_PROBE": "  "}) is None


def test_full_settings_parse():
    s = from_env({
        "INKLING_PROBE": "/tmp/x", "INKLING_PROBE_INCLUDE": "layers.*.mlp.*, logits",
        "INKLING_PROBE_EXCLUDE": "*.topk_idx", "INKLING_PROBE_STEPS": "2:5", "INKLING_PROBE_TOKENS": "-4:",
        "INKLING_PROBE_MODE": "Stats", "INKLING_PROBE_RANKS": "0,3", "INKLING_PROBE_OVERWRITE": "1",
        "INKLING_PROBE_SEGMENT_MB": "64", "INKLING_PROBE_PACK_KB": "0", "INKLING_PROBE_WRITER": "inline",
    })
    assert s.include == ("layers.*.mlp.*", "logits") and s.exclude == ("*.topk_idx",)
    assert s.wants("layers.3.mlp.experts") and s.wants("logits")
    assert not s.wants("layers.3.mlp.topk_idx") and not s.wants("embed")
    assert [i for i in range(8) if i in s.steps] == [2, 3, 4]
    assert s.tokens == slice(-4, None)
    assert s.mode == "stats" and s.ranks == frozenset({0, 3}) and s.overwrite
    assert s.rank_records(3) and not s.rank_records(1)
    assert s.segment_mb == 64 and s.pack_kb == 0 and s.writer == "inline"


@pytest.mark.parametrize("text, inside, outside", [
    ("3", [3], [2, 4]), ("0,2", [0, 2], [1, 3]), (":2", [0, 1], [2]), ("5:", [5, 99], [4]), ("", [0, 7], []),
])
def test_step_forms(text, inside, outside):
    r = parse_steps(text)
    assert all(i in r for i in inside) and not any(i in r for i in outside)


def test_token_forms():
    assert parse_tokens("0:16") == slice(0, 16)
    assert parse_tokens("-1") == slice(-1, None)
    assert parse_tokens("5") == slice(5, 6)


@pytest.mark.parametrize("var, value", [
    ("INKLING_PROBE_MODE", "fast"), ("INKLING_PROBE_STEPS", "a:b"), ("INKLING_PROBE_STEPS", "-1"),
    ("INKLING_PROBE_TOKENS", "1:2:3"), ("INKLING_PROBE_RANKS", "x"), ("INKLING_PROBE_OVERWRITE", "maybe"),
    ("INKLING_PROBE_SEGMENT_MB", "0"), ("INKLING_PROBE_WRITER", "thread"), ("INKLING_PROBE_COLOUR", "1"),
])
def test_bad_values_name_the_variable(var, value):
    with pytest.raises(SettingsError) as e:
        from_env({"INKLING_PROBE": "/tmp/x", var: value})
    msg = str(e.value)
    assert var in msg and "\n" not in msg


def test_make_overrides_take_text_or_values():
    s = make("/tmp/y", steps="1:3", include=["a.*", "b"], mode="hash", tokens=slice(0, 2))
    assert s.path == "/tmp/y" and s.include == ("a.*", "b") and s.mode == "hash"
    assert isinstance(s.steps, StepRange) and 1 in s.steps and 3 not in s.steps
    with pytest.raises(SettingsError, match="colour"):
        make("/tmp/y", colour=True)


def test_make_validates_python_values_like_text():
    assert make("/tmp/y", steps=1).steps.ids == frozenset({1})
    assert make("/tmp/y", ranks=[0, 2]).ranks == frozenset({0, 2}) and make("/tmp/y", ranks=0).ranks == {0}
    assert make("/tmp/y", overwrite=True).overwrite and make("/tmp/y", segment_mb=64).segment_mb == 64
    for bad in (dict(segment_mb=0), dict(steps=-1), dict(mode="fast"), dict(ranks="x")):
        with pytest.raises(SettingsError, match="(?i)INKLING_PROBE_" + next(iter(bad))):
            make("/tmp/y", **bad)


def test_one_reading_of_every_0_1_switch():
    from inkling_model.switches import faults
    from inkling_model.runtime import runtime
    from inkling_probe.settings import debug, env_flag

    assert runtime.env_flag is env_flag  # the model's switches read through the toolkit's one parser
    for on in ("1", "true", " Yes "):
        assert env_flag("X", {"X": on}) and debug({"INKLING_PROBE_DEBUG": on})
        assert faults.from_env({faults.switch_var("renorm_rows"): on}) == {"renorm_rows"}
    for off in ("", "0", "false", "NO"):
        assert not env_flag("X", {"X": off}) and not debug({"INKLING_PROBE_DEBUG": off})
        assert faults.from_env({faults.switch_var("renorm_rows"): off}) == frozenset()
    assert not env_flag("X", {})
    with pytest.raises(SettingsError, match=r"^INKLING_FAULT_RENORM_ROWS='2': expected 1 or 0$"):
        faults.from_env({faults.switch_var("renorm_rows"): "2"})
    with pytest.raises(ValueError, match=r"^INKLING_ENFORCE_EAGER='maybe': expected 1 or 0$"):
        env_flag("INKLING_ENFORCE_EAGER", {"INKLING_ENFORCE_EAGER": "maybe"})


def test_a_bad_debug_switch_is_named_at_start_and_never_raises_while_reporting():
    with pytest.raises(SettingsError, match=r"^INKLING_PROBE_DEBUG='on': expected 1 or 0$"):
        from_env({"INKLING_PROBE_DEBUG": "on"})
    from inkling_probe.settings import debug

    assert debug({"INKLING_PROBE_DEBUG": "on"}) is False

@pytest.mark.parametrize("var, value", [
    ("INKLING_PROBE_STEPS", "5:2"), ("INKLING_PROBE_STEPS", "3:3"), ("INKLING_PROBE_TOKENS", "3:1"),
    ("INKLING_PROBE_TOKENS", "-1:-3"), ("INKLING_PROBE_TOKENS", ":0"), ("INKLING_PROBE_TOKENS", "4:4"),
])
def test_ranges_that_select_nothing_are_refused_at_start(var, value):
    """``INKLING_PROBE_STEPS=5:2`` recorded nothing and the run still said ``dump: d``, exit 0."""
    with pytest.raises(SettingsError, match=f"{var}='{value}': selects no "):
        from_env({"INKLING_PROBE": "/tmp/x", var: value})


def test_ranges_that_may_select_something_stay_allowed():
    assert parse_tokens("-3:") == slice(-3, None) and parse_tokens("2:-1") == slice(2, -1)
    assert parse_tokens(":-1") == slice(None, -1) and 4 in parse_steps("4:5")
