import pytest

from inkling_probe.errors import SettingsError
from inkling_probe.store.namemap import NameMap

RULES = r"""
[[rule]]
match = 'model\.layers\.(\d+)\.self_attn\.q_norm((?:\.in\..*)?)'
to = 'layers.\1.attn.q\2'
[[rule]]
match = 'model\.layers\.\d+\.dropout'
to = ''
"""


def test_rules_rename_in_order_and_keep_suffixes():
    m = NameMap.from_toml(RULES)
    assert m.apply("model.layers.3.self_attn.q_norm") == "layers.3.attn.q"
    assert m.apply("model.layers.3.self_attn.q_norm.in.0") == "layers.3.attn.q.in.0"
    assert m.apply("model.layers.3.dropout") is None  # empty target drops
    assert m.apply("lm_head") == "lm_head"             # unmatched kept ...
    strict = NameMap.from_toml("drop_unmatched = true\n" + RULES)
    assert strict.apply("lm_head") is None              # ... unless drop_unmatched


def test_load_from_file_and_errors(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(RULES)
    assert NameMap.load(p).apply("model.layers.0.self_attn.q_norm") == "layers.0.attn.q"
    with pytest.raises(SettingsError, match="no such name map"):
        NameMap.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rule]]\nmatch = '('\nto = 'x'\n")
    with pytest.raises(SettingsError, match="rule 1"):
        NameMap.load(bad)
    bad.write_text("rule = [")
    with pytest.raises(SettingsError, match="not valid TOML"):
        NameMap.load(bad)


POLYNOMIAL = [r"a*a*a*a*b", r"\d*\d*\d*\d*x", r".*.*.*.*.*.*=x", r".*.*.*.*.*.*.*.*=x", r"(a+)+b",
              r"(.*,)*x", r"[ab]*[bc]*[ca]*[abc]*d"]


@pytest.mark.parametrize("pattern", POLYNOMIAL)
def test_backtracking_patterns_match_in_linear_time(pattern):
    """Patterns that make Python's backtracking re take seconds to forever on a near miss (4-8 stars
    over 1024-character keys) run under RE2: every key within the second, whatever the pattern."""
    import time

    m = NameMap.from_toml(f"[[rule]]\nmatch = '{pattern}'\nto = 'hit'\n")
    keys = ["a" * 1024, "1" * 1024, "=" * 1023 + "y", "ab," * 341, "abc" * 341]
    t0 = time.perf_counter()
    for key in keys:
        assert m.apply(key) == key  # a near miss: no rule matches, the key is kept
    assert time.perf_counter() - t0 < 1.0
    assert m.apply(("a" * 1023 + "b")[-1024:]) == ("hit" if pattern in ("a*a*a*a*b", "(a+)+b") else "a" * 1023 + "b")


@pytest.mark.parametrize("pattern,why", [(r"(?=a)a", "look-arounds"), (r"(a)\1", "back-references"),
                                         (r"[[:alpha:]]", "read this set differently")])
def test_patterns_that_cannot_run_in_linear_time_are_refused_at_load(pattern, why):
    with pytest.raises(SettingsError, match=f"rule 1 match .*{why}"):
        NameMap.from_toml(f"[[rule]]\nmatch = '{pattern}'\nto = 'x'\n")


def test_targets_expand_as_python_does_and_bad_targets_are_refused_at_load():
    import re

    m = NameMap.from_toml("[[rule]]\nmatch = 'a(?P<x>\\d)(b)?é'\nto = '\\g<x>é-\\2\\n\\101\\g<0>'\n")
    assert m.apply("a1é") == re.fullmatch(r"a(?P<x>\d)(b)?é", "a1é").expand(r"\g<x>é-\2\n\101\g<0>")
    for to, why in [(r"\3", "group 3"), (r"\g<y>", "group 'y'"), (r"\q", r"bad escape \\q")]:
        with pytest.raises(SettingsError, match=f"rule 1 to .*{why}"):
            NameMap.from_toml(f"[[rule]]\nmatch = 'a(\\d)(b)'\nto = '{to}'\n")


@pytest.mark.parametrize("text,why", [
    ('drop_unmatched = "false"', "'drop_unmatched' must be true or false"),
    ("drop_unmatched = 0", "'drop_unmatched' must be true or false"),
    ("description = 3", "'description' must be a string"),
    ("rule = 'x'", "'rule' must be an array of tables"),
    ("[[rule]]\nmatch = 'a'\nto = 'b'\nflags = 'i'", "rule 1: unknown key 'flags'"),
])
def test_map_values_are_type_checked(text, why):
    """``drop_unmatched = "false"`` (a string) was read as true and dropped every unmatched row."""
    with pytest.raises(SettingsError, match=why):
        NameMap.from_toml(text)


def test_shipped_map_still_loads_and_renames():
    m = NameMap.load("hf_inkling")
    assert m.apply("model.layers.3.self_attn.q_norm.in.0") == "layers.3.attn.q.in.0"
    assert m.apply("model.language_model.layers.0.mlp.experts") == "layers.0.mlp.experts"
