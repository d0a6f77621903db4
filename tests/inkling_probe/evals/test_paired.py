"""``inkling-probe paired``: hand-computed flips, p, delta and CI, per seed and pooled; the gate as the
exit code; one-sided items reported; bad input as one line, exit 2."""

import json

import pytest
from click.testing import CliRunner

from inkling_probe.cli.paired import command
from inkling_probe.evals import paired

# seed 1: A 1 1 0 0, B 1 0 1 1 -> A only 1 (item 2), B only 2 (items 3, 4), delta +0.25
# seed 2: A 1 1 1 0, B 0 0 1 0 -> A only 2, B only 0, delta -0.5
A = {1: [1, 1, 0, 0], 2: [1, 1, 1, 0]}
B = {1: [1, 0, 1, 1], 2: [0, 0, 1, 0]}


def _write(path, table, extra=()):
    lines = [{"id": f"q{i + 1}", "seed": s, "correct": bool(v)} for s, vs in table.items() for i, v in enumerate(vs)]
    path.write_text("\n".join(json.dumps(x) for x in [*lines, *extra]) + "\n")
    return str(path)


def _invoke(*args):
    return CliRunner().invoke(command, [str(a) for a in args])


def test_by_hand(tmp_path):
    r = paired.compare(paired.load(_write(tmp_path / "a", A)), paired.load(_write(tmp_path / "b", B)), gate=0.2)
    s1, s2 = r.per_seed
    assert (s1.n, s1.a_only, s1.b_only, s1.delta) == (4, 1, 2, 0.25)
    assert s1.mcnemar_p == 1.0  # 2 P(X <= 1), X ~ Bin(3, 1/2) = 2 * 4/8
    assert (s2.a_only, s2.b_only, s2.delta, s2.mcnemar_p) == (2, 0, -0.5, 0.5)  # 2 * 1/4
    p = r.pooled
    assert (p.n, p.a_only, p.b_only, p.mean_a, p.mean_b, p.delta) == (8, 3, 2, 0.625, 0.5, -0.125)
    assert p.mcnemar_p == 1.0  # 2 P(X <= 2), X ~ Bin(5, 1/2) = 2 * 16/32
    # items resampled whole: item deltas over both seeds are q1 -1, q2 -2, q3 +1, q4 +1 (sum over 2 runs)
    assert p.ci[0] <= p.delta <= p.ci[1] and -1.0 <= p.ci[0] < p.ci[1] <= 0.5
    assert r.passed and not paired.compare(paired.load(str(tmp_path / "a")), paired.load(str(tmp_path / "b")),
                                           gate=0.1).passed


def test_cli_json_and_gate_exit_codes(tmp_path):
    a, b = _write(tmp_path / "a.jsonl", A), _write(tmp_path / "b.jsonl", B)
    res = _invoke(a, b, "--gate", "0.2", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {k: out[k] for k in ("n", "a_only", "b_only", "mcnemar_p", "delta", "pass")} == \
        {"n": 8, "a_only": 3, "b_only": 2, "mcnemar_p": 1.0, "delta": -0.125, "pass": True}
    assert len(out["ci"]) == 2 and len(out["per_seed"]) == 2 and out["bootstrap"]["seed"] == 0
    assert _invoke(a, b, "--gate", "0.2", "--json").output == res.output  # seeded: identical
    fail = _invoke(a, b)  # default gate 0.02
    assert fail.exit_code == 1 and "FAIL" in fail.output and "+0.2500" in fail.output


def test_one_sided_items_reported(tmp_path):
    a = _write(tmp_path / "a", A, [{"id": "extra", "seed": 1, "correct": True}])
    b = _write(tmp_path / "b", B, [{"id": "new", "seed": 2, "correct": False}])
    out = json.loads(_invoke(a, b, "--json", "--gate", "1").output)
    assert out["n"] == 8 and out["only_a"] == [{"seed": 1, "id": "extra"}] and out["only_b"] == [{"seed": 2, "id": "new"}]
    text = _invoke(a, b, "--gate", "1").output
    assert "1 item(s) in A only, not paired: extra (seed 1)" in text and "in B only" in text


def test_scores_without_seeds(tmp_path):
    (tmp_path / "a").write_text('{"id": 1, "score": 0.5}\n{"id": 2, "score": 0.9}\n{"id": 3, "score": 0.1}\n')
    (tmp_path / "b").write_text('{"id": 1, "score": 0.7}\n{"id": 2, "score": 0.9}\n{"id": 3, "score": 0.0}\n')
    out = json.loads(_invoke(tmp_path / "a", tmp_path / "b", "--json", "--gate", "0.05").output)
    assert (out["a_only"], out["b_only"], out["per_seed"]) == (1, 1, [])
    assert out["delta"] == pytest.approx(0.1 / 3) and out["pass"] is True


@pytest.mark.parametrize("text,message", [
    ('{"id": 1, "correct": true}\n{"id": 2, "correct": tru}\n', "a:2: not JSON"),
    ('{"correct": true}\n', "a:1: id = null: expected a string or integer item id"),
    ('{"id": 1, "correct": true, "score": 1}\n', "a:1: needs exactly one of 'correct' and 'score'"),
    ('{"id": 1, "correct": 2}\n', "a:1: correct = 2: expected true, false, 0 or 1"),
    ('{"id": 1, "score": "high"}\n', 'a:1: score = "high": expected a finite number'),
    ('{"id": 1, "correct": 1}\n{"id": 1, "correct": 0}\n', "a:2: id 1 appears twice"),
    ('{"id": 1, "correct": 1, "seed": 0}\n{"id": 2, "correct": 0}\n', "a:2: 'seed' on some lines only"),
    ('{"id": 1, "correct": 1}\n{"id": 2, "score": 0.5}\n', "a:2: has 'score' where earlier lines have 'correct'"),
    ('[1, 2]\n', "a:1: expected a JSON object, got list"),
    ('\n', "a: no records"),
    ('{"id": 9, "correct": 1}\n', "no item (seed, id) in common"),
])
def test_bad_input_is_one_line(tmp_path, text, message):
    (tmp_path / "a").write_text(text)
    (tmp_path / "b").write_text('{"id": 1, "correct": 1}\n{"id": 2, "correct": 0}\n')
    res = CliRunner().invoke(command, [str(tmp_path / "a"), str(tmp_path / "b")])
    assert res.exit_code == 2 and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_missing_file_and_kind_mismatch(tmp_path):
    (tmp_path / "s").write_text('{"id": 1, "score": 1.0}\n')
    (tmp_path / "c").write_text('{"id": 1, "correct": 1}\n')
    assert "can't read" in _invoke(tmp_path / "nope", tmp_path / "c").output
    res = _invoke(tmp_path / "c", tmp_path / "s")
    assert res.exit_code == 2 and "has 'score' results where" in res.output


def test_five_seeds_by_hundred_items(tmp_path):
    """The bring-up protocol: 5 seeds x 100 items; per seed and pooled against counts done here by numpy."""
    import math

    import numpy as np

    rng = np.random.default_rng(7)
    a = rng.random((5, 100)) < 0.70  # [seed, item]
    b = rng.random((5, 100)) < 0.66
    for name, m in (("a", a), ("b", b)):
        (tmp_path / name).write_text("".join(json.dumps({"id": i, "seed": s, "correct": bool(m[s, i])}) + "\n"
                                             for s in range(5) for i in range(100)))
    out = json.loads(_invoke(tmp_path / "a", tmp_path / "b", "--json").output)
    assert [p["seed"] for p in out["per_seed"]] == [0, 1, 2, 3, 4] and out["n"] == 500
    for s, p in enumerate(out["per_seed"]):
        assert (p["a_only"], p["b_only"]) == (int((a[s] & ~b[s]).sum()), int((b[s] & ~a[s]).sum()))
        assert p["delta"] == pytest.approx(b[s].mean() - a[s].mean())
    lo, hi = int((a & ~b).sum()), int((b & ~a).sum())
    k, n = min(lo, hi), lo + hi
    assert out["mcnemar_p"] == pytest.approx(min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n))
    assert out["delta"] == pytest.approx(b.mean() - a.mean()) and out["ci"][0] < out["delta"] < out["ci"][1]
