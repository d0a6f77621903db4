"""``inkling-probe health`` on hand-made gen-logs: each problem found, healthy responses pass; bad input."""

import json

import pytest
from click.testing import CliRunner

from inkling_probe.cli.health import command
from inkling_probe.evals import health


def _log(tmp_path, *records):
    path = tmp_path / "gen.jsonl"
    base = {"finish_reason": "eos", "max_new_tokens": 16, "eos_ids": [2]}
    path.write_text("".join(json.dumps({"id": i, **base, **r}) + "\n" for i, r in enumerate(records)))
    return str(path)


def _check(**record):
    return health.check({"id": 0, "finish_reason": "eos", "max_new_tokens": 16, "eos_ids": [2], "steps": None, **record})


def test_each_problem_by_hand():
    assert _check(tokens=[5, 6, 2]).healthy
    r = _check(tokens=[5, 2, 6, 2, 7], finish_reason="length", max_new_tokens=5)
    assert r.eos_not_honoured == [1, 3] and r.runaway and len(r.problems) == 2
    assert _check(tokens=[5, 6, 2], finish_reason="length", max_new_tokens=3).eos_not_honoured == [2]
    r = _check(tokens=[1, 9, 9, 9, 9, 9, 9, 9, 9, 2])
    assert (r.longest_run, r.longest_run_token) == (8, 9) and "repeated 8 times" in r.problems[0]
    cyc = [3, 4, 5] * 6 + [2]  # 16 4-grams: 3 of the cycle and (3, 4, 5, 2) distinct, 12/16 repeat
    r = _check(tokens=cyc)
    assert r.repeat_rate == 12 / 16 and "of 4-grams repeat" in r.problems[0]
    r = _check(tokens=[5, 2], steps=[{"top": [[5, 1.0]], "nonfinite": 0}, {"top": [], "nonfinite": 7}])
    assert r.nonfinite == 7 and r.problems == ["7 non-finite logits"]
    assert health.longest_run([]) == (0, None) and health.repeat_rate([1, 2], 4) == (0.0, 0)


def test_cli_summary_worst_and_exit_codes(tmp_path):
    ok = _log(tmp_path, {"tokens": [5, 6, 2]}, {"tokens": [7, 2]})
    res = CliRunner().invoke(command, [ok])
    assert res.exit_code == 0 and "2 responses (eos 2); 0 unhealthy" in res.output, res.output
    bad = _log(tmp_path, {"tokens": [5, 6, 2]}, {"tokens": [9] * 16, "finish_reason": "length"},
               {"tokens": [5, 7, 8, 6] * 4, "finish_reason": "length"})
    res = CliRunner().invoke(command, [bad, "--json"])
    out = json.loads(res.output)
    assert res.exit_code == 1 and out["unhealthy"] == 2 and out["worst"] == [1, 2]
    assert out["finish_reasons"] == {"eos": 1, "length": 2} and "runaway" not in out["problems"]
    assert out["capped"] == 2  # end id 2 known, never emitted: capped, unhealthy here for the collapse
    assert "worst offenders" in CliRunner().invoke(command, [bad]).output


def test_extra_eos_ids(tmp_path):
    log = _log(tmp_path, {"tokens": [5, 7, 6, 8], "finish_reason": "length", "max_new_tokens": 4, "eos_ids": []})
    out = json.loads(CliRunner().invoke(command, [log, "--json"]).output)["responses"][0]
    assert out["eos_not_honoured"] == [] and "no end id known" in out["problems"][0]
    out = json.loads(CliRunner().invoke(command, [log, "--json", "--eos", "7"]).output)["responses"][0]
    assert out["eos_not_honoured"] == [1]


@pytest.mark.parametrize("line,message", [
    ('{"id": 0, "finish_reason": "eos"}', "gen.jsonl:1: tokens = null: expected a list of integer token ids"),
    ('{"id": 0, "tokens": [1, "a"], "finish_reason": "eos"}', 'tokens = [1, "a"]'),
    ('{"id": 0, "tokens": [1], "finish_reason": 3}', "finish_reason = 3: expected a string"),
    ('{"id": 0, "tokens": [1], "finish_reason": "eos", "max_new_tokens": -1}', "max_new_tokens = -1"),
    ('{"id": 0, "tokens": [1], "finish_reason": "eos", "steps": [1]}', "steps = [1]: expected a list of"),
    ('{"id": 0, "tokens": [1], "finish_reason": "eos"', "gen.jsonl:1: not JSON"),
])
def test_bad_input_is_one_line(tmp_path, line, message):
    (tmp_path / "gen.jsonl").write_text(line + "\n")
    res = CliRunner().invoke(command, [str(tmp_path / "gen.jsonl")])
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_capped_is_not_a_runaway():
    """The cap reached with an end id known and never emitted is `capped` (healthy); `runaway` needs no
    end id known, or an end id emitted and not honoured (issue 22: a healthy checkpoint at
    --max-new-tokens 24 was called a runaway, exit 1, like the EOS bug)."""
    capped = _check(tokens=[5, 6, 7, 8], finish_reason="length", max_new_tokens=4)
    assert capped.capped and not capped.runaway and capped.healthy
    assert not health.check({**_record([5, 6, 7, 8]), "max_new_tokens": 4},
                            health.Limits(fail_capped=True)).healthy
    unknown = _check(tokens=[5, 6, 7, 8], finish_reason="length", max_new_tokens=4, eos_ids=[])
    assert unknown.runaway and not unknown.capped and "no end id known" in unknown.problems[0]
    ignored = _check(tokens=[5, 2, 7, 8], finish_reason="length", max_new_tokens=4)
    assert ignored.runaway and not ignored.capped
    assert "runaway: ran to the token cap (4); an end id was emitted and not honoured" in ignored.problems


def _record(tokens):
    return {"id": 0, "tokens": tokens, "finish_reason": "length", "max_new_tokens": 16, "eos_ids": [2], "steps": None}


def test_cli_capped_exit_codes(tmp_path):
    log = _log(tmp_path, *[{"tokens": [5 + i, 6, 7, 8], "finish_reason": "length", "max_new_tokens": 4}
                           for i in range(3)])
    res = CliRunner().invoke(command, [log])
    assert res.exit_code == 0, res.output
    assert "3 responses (length 3); 0 unhealthy; 3 capped (token cap reached, end id never emitted: healthy)" \
        in " ".join(res.output.split())  # rich wraps the line at 160 columns
    res = CliRunner().invoke(command, [log, "--fail-capped"], env={"COLUMNS": "200"})  # a table row unwrapped
    assert res.exit_code == 1 and "3 unhealthy; 3 capped" in res.output, res.output
    assert "capped: reached the token cap (4) without emitting an end id" in res.output
