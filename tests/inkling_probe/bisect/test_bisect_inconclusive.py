"""A trial the oracle could not check is inconclusive, never a failure (issue 41 item 5).

The runs are written in this process (the runner's command execution replaced): ``TWICE=1`` records
``layers.1.x`` twice, so compare cannot pair its calls (not comparable: no divergence, one row
unchecked); ``FAULT=1`` doubles ``layers.0.x`` (a divergence). Before, the unchecked row failed the
trial and ddmin named the harmless TWICE toggle; a precision search answered a set one layer too big.
"""
import json

import pytest
import torch
from dumps import write

from inkling_probe.bisect import runner as runner_mod
from inkling_probe.bisect.flags import bisect_flags
from inkling_probe.bisect.oracle import CompareOracle, ExitOracle, outcome, upgraded
from inkling_probe.bisect.precision import bisect_precision
from inkling_probe.bisect.runner import Command, Runner
from inkling_probe.bisect.state import State, digest
from inkling_probe.bisect.toggles import Toggle

TWICE, FAULT, INERT = (Toggle("twice", "TWICE", "0", "1"), Toggle("fault", "FAULT", "0", "1"),
                       Toggle("inert", "INERT", "0", "1"))
REASON = "1 key row(s) unchecked (not comparable): layers.1.x@0"


def _steps(twice=False, fault=False, bad_layer=None):
    one = torch.ones(4, 8)
    out = [("embed", torch.arange(16.0).reshape(4, 4)), ("layers.0.x", one * (2 if fault else 1)),
           ("layers.1.x", one * 2)] + ([("layers.1.x", one * 2)] if twice else [])
    out += [(f"layers.{i}.x", one * (3 if i == bad_layer else 1)) for i in (3, 4, 5)]
    return [out + [("logits", torch.ones(4, 3))]]


@pytest.fixture
def fake_runs(monkeypatch):
    """Flags: TWICE, FAULT. Precision (``INKLING_BF16_LAYERS``): layer 4 diverges unless kept, and
    keeping layer 4 without layer 3 leaves ``layers.1.x`` unchecked (the measured "3,4 instead of 4")."""
    calls = []

    def run(command, overrides, folder, record, timeout, on_start=None):
        kept = overrides.get("INKLING_BF16_LAYERS")
        if kept is not None:
            layers = {int(x) for x in kept.split(",") if x}
            steps = _steps(twice=4 in layers and 3 not in layers, bad_layer=None if 4 in layers else 4)
        else:
            steps = _steps(overrides.get("TWICE") == "1", overrides.get("FAULT") == "1")
        write(folder / "dump", steps)
        calls.append(folder.name)
        return {"command": command.text, "env": overrides, "exit_code": 0, "crashed": False, "why": None,
                "seconds": 0.0, "tail": "", "dir": f"pending/{folder.name}", "dump": f"pending/{folder.name}/dump"}

    monkeypatch.setattr(runner_mod, "_run", run)
    return calls


def _flags(tmp_path, toggles):
    ref = write(tmp_path / "ref", _steps())
    state = State(tmp_path / "w", "flags", {})
    return bisect_flags(Runner(state), CompareOracle(ref), Command("fake {dump}"), toggles), state


def _precision(tmp_path):
    ref = write(tmp_path / "ref", _steps())
    state = State(tmp_path / "w", "precision", {})
    return bisect_precision(Runner(state), CompareOracle(ref), Command("fake {dump}"), [3, 4, 5]), state


def test_unchecked_rows_make_a_run_inconclusive_a_divergence_fails_it(tmp_path, fake_runs):
    ref = write(tmp_path / "ref", _steps())
    oracle = CompareOracle(ref)
    runner = Runner(State(tmp_path / "w", "flags", {}))
    judged = {}
    for name, env in (("twice", {"TWICE": "1"}), ("fault", {"FAULT": "1"}), ("both", {"TWICE": "1", "FAULT": "1"}),
                      ("clean", {})):
        rec = runner.execute(name, name, Command("fake {dump}"), env, record=True)
        judged[name] = oracle.judge(rec, runner)
    assert outcome(judged["twice"]) == "inconclusive" and judged["twice"]["why"] == REASON
    assert outcome(judged["fault"]) == outcome(judged["both"]) == "fail"
    assert outcome(judged["clean"]) == "pass"


@pytest.mark.parametrize("code,want", [(0, "pass"), (1, "fail"), (2, "fail"), (125, "inconclusive")])
def test_exit_oracle_reads_125_as_could_not_check(code, want):
    assert outcome(ExitOracle().judge({"exit_code": code}, None)) == want


def test_flags_names_the_inconclusive_toggle_not_as_the_culprit(tmp_path, fake_runs):
    ans, state = _flags(tmp_path, [TWICE, FAULT, INERT])
    assert ans["failing_set"] is None and ans["toggles"] == [] and ans["bad_env"] == {}
    assert ans["inconclusive"] == [{"trial": "twice", "bad": ["twice"], "why": REASON}]
    assert ans["smallest_failing"] == ["fault"]  # seen failing, not shown minimal
    (key,) = [k for k, v in state.verdicts.items() if v["inconclusive"]]
    assert key == "bad:twice" and state.verdicts[key]["passed"] is False
    assert (tmp_path / "w" / "inconclusive").is_dir()
    assert {r["dir"].split("/")[0] for r in state.runs if r["key"] == key} == {"inconclusive"}


def test_flags_without_an_inconclusive_trial_is_unchanged(tmp_path, fake_runs):
    ans, _ = _flags(tmp_path, [INERT, FAULT])
    assert ans["failing_set"] == ["fault"] and ans["inconclusive"] == []
    assert ans["bad_env"] == {"FAULT": "1"} and not (tmp_path / "w" / "inconclusive").exists()


def test_flags_an_inconclusive_all_bad_run_stops_with_no_answer(tmp_path, fake_runs):
    ans, _ = _flags(tmp_path, [TWICE, INERT])
    assert ans["failing_set"] is None and ans["tests"] == 1 and ans["smallest_failing"] is None
    assert [t["trial"] for t in ans["inconclusive"]] == ["twice+inert"]


def test_precision_does_not_answer_a_set_that_rests_on_an_inconclusive_trial(tmp_path, fake_runs):
    ans, _ = _precision(tmp_path)
    assert ans["reference_layers"] is None and ans["quantized_layers"] is None
    assert ans["inconclusive"] == [{"trial": "ref-4", "reference_layers": [4], "why": REASON}]
    assert ans["smallest_passing"] == [3, 4]


def test_resume_answers_inconclusive_trials_from_the_state(tmp_path, fake_runs):
    first, _ = _flags(tmp_path, [TWICE, FAULT, INERT])
    state = State(tmp_path / "w", "flags", {})  # the first bisect's lock is this process's: taken again
    n = len(fake_runs)
    again = bisect_flags(Runner(state), CompareOracle(str(tmp_path / "ref")), Command("fake {dump}"),
                         [TWICE, FAULT, INERT])
    assert again == first and len(fake_runs) == n and state.resumed_runs == n


def test_a_state_written_before_inconclusive_existed_loads_and_is_judged_by_todays_rules(tmp_path, fake_runs):
    """Old verdicts had no ``inconclusive`` (and a row left unchecked failed the run): such a state file
    still loads, its unchecked-only failures read as inconclusive, so the resumed hunt runs nothing and
    gives today's answer."""
    first, state = _flags(tmp_path, [TWICE, FAULT, INERT])
    doc = json.loads(state.path.read_text())
    for key, v in doc["verdicts"].items():
        old = {k: x for k, x in v.items() if k not in ("inconclusive", "why", "digest")}
        doc["verdicts"][key] = {**old, "digest": digest({"key": key, **old}, state.salt)}
    assert not any("inconclusive" in v for v in doc["verdicts"].values())
    state.path.write_text(json.dumps(doc))
    n = len(fake_runs)
    again = bisect_flags(Runner(State(tmp_path / "w", "flags", {})), CompareOracle(str(tmp_path / "ref")),
                         Command("fake {dump}"), [TWICE, FAULT, INERT])
    assert len(fake_runs) == n and again["inconclusive"][0]["trial"] == "twice"
    assert again["smallest_failing"] == first["smallest_failing"] == ["fault"]


def test_upgrading_an_old_verdict_keeps_divergences_and_exit_codes():
    assert upgraded({"passed": False, "first_divergence": "a", "culprit": "a", "unchecked": ["b"],
                     "n_unchecked": 1})["inconclusive"] is False
    assert upgraded({"passed": False, "exit_code": 1})["inconclusive"] is False
    assert upgraded({"passed": False, "exit_code": 125})["inconclusive"] is True
    assert upgraded({"passed": True, "exit_code": 0})["inconclusive"] is False
    crashed = {"passed": False, "crashed": True, "why": "killed by signal 9"}
    assert upgraded(crashed) == {**crashed, "inconclusive": False}


# -- layers: a layer whose test could not be checked is set aside, never taken as the first divergence --
L = 12


def _layers(side: str, born: int, twice: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 32, generator=g)
    out = [("embed", x)]
    for i in range(L):
        x = x + 0.1 * torch.randn(8, 32, generator=g)
        if side == "cand" and i == born:
            x = x + 1.0
        out += [(f"layers.{i}.mlp", x), (f"layers.{i}.resid", x.clone())]
        if side == "cand" and i == twice:
            out.append((f"layers.{i}.resid", x.clone()))  # two calls against one: not comparable
    return [out + [("logits", x.sum(-1, keepdim=True))]]


@pytest.fixture
def fake_layer_runs(monkeypatch):
    def run(command, overrides, folder, record, timeout, on_start=None):
        side, born, twice = command.text.split(":")
        settings = {k: overrides[v] for k, v in (("include", "INKLING_PROBE_INCLUDE"), ("mode", "INKLING_PROBE_MODE"))
                    if overrides.get(v)}
        write(folder / "dump", _layers(side, int(born), int(twice)), **settings)
        return {"command": command.text, "env": overrides, "exit_code": 0, "crashed": False, "why": None,
                "seconds": 0.0, "tail": "", "dir": f"pending/{folder.name}", "dump": f"pending/{folder.name}/dump"}

    monkeypatch.setattr(runner_mod, "_run", run)


def _layer_search(tmp_path, born, twice):
    from inkling_probe.bisect.layers import LayerSearch

    state = State(tmp_path / "w", "layers", {})
    sides = {side: Command(f"{side}:{born}:{twice}") for side in ("ref", "cand")}
    return LayerSearch(Runner(state), sides, {}).run()


def test_layers_a_divergence_next_to_an_inconclusive_layer_is_not_named(tmp_path, fake_layer_runs):
    """Layer 5 cannot be checked, layer 6 diverges: the first divergent layer is 5 or 6, so none is named."""
    ans = _layer_search(tmp_path, born=6, twice=5)
    assert not ans["diverged"] and ans["layer"] is None
    assert [t["layer"] for t in ans["inconclusive"]] == ["layers.5"]
    assert "not comparable" in ans["inconclusive"][0]["why"]
    assert (ans["passes_through"], ans["fails_at"]) == ("layers.4", "layers.6")


def test_layers_an_inconclusive_layer_below_a_passing_one_is_set_aside(tmp_path, fake_layer_runs):
    """Layer 5 cannot be checked; the search tests layer 4 instead, and layer 8 is found between passing
    layer 7 and failing layer 8 (before, layer 5 "failed" and was named)."""
    ans = _layer_search(tmp_path, born=8, twice=5)
    assert ans["diverged"] and ans["layer"] == "layers.8" and ans["first_divergence"] == "layers.8.mlp"
    assert ans["inconclusive"] == [] and [t["layer"] for t in ans["set_aside"]] == ["layers.5"]


def test_layers_no_all_clear_over_a_layer_that_could_not_be_checked(tmp_path, fake_layer_runs):
    ans = _layer_search(tmp_path, born=99, twice=5)
    assert not ans["diverged"] and [t["layer"] for t in ans["inconclusive"]] == ["layers.5"]


def test_layers_without_an_inconclusive_test_is_unchanged(tmp_path, fake_layer_runs):
    ans = _layer_search(tmp_path, born=8, twice=99)
    assert ans["layer"] == "layers.8" and ans["inconclusive"] == ans["set_aside"] == []
    assert ans["runs_per_side"] <= ans["bound"]
