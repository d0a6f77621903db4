"""Parity on hand-made logits: near-tie vs confident by hand, the free-run divergence, checksums; the
command on synthetic dumps, bad input as one line."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dumps import write
from inkling_probe.cli.parity import command
from inkling_probe.evals import parity

# four vocabulary entries; the std of [1, .99, 0, 0] is ~0.4975, so the 0.05 threshold is ~0.0249
REF = np.array([[1.0, 0.99, 0.0, 0.0], [0.0, 1.0, 0.0, 0.5], [2.0, 0.0, 0.0, 0.0]], np.float32)
CAND = np.array([[0.98, 1.0, 0.0, 0.0], [0.0, 0.2, 0.0, 0.6], [2.0, 0.0, 0.0, 0.0]], np.float32)


def test_classes_by_hand():
    ms = parity.classify(REF, CAND, 0.05, step=0)
    assert [(m.row, m.ref_token, m.cand_token, m.kind) for m in ms] == [(0, 0, 1, "near_tie"), (1, 1, 3, "confident")]
    assert ms[0].ref_margin == pytest.approx(0.01) and ms[0].threshold == pytest.approx(0.05 * REF[0].std())
    assert ms[1].ref_margin == pytest.approx(0.5)
    assert [m.kind for m in parity.classify(REF, CAND, 2.0, 0)] == ["near_tie", "near_tie"]


def _onehot(tok, v=4):
    a = np.zeros((1, v), np.float32)
    a[0, tok] = 1.0
    return a


def test_free_run_divergence_and_teacher_forced_steps():
    ref = [REF, _onehot(2), _onehot(3), _onehot(1), _onehot(1)]
    cand = [REF, _onehot(2), _onehot(1), _onehot(1), _onehot(1), _onehot(1)]
    p = parity.compare(ref, cand)
    assert p.ref_tokens == [0, 2, 3, 1, 1] and p.cand_tokens == [0, 2, 1, 1, 1, 1] and p.diverged_at == 2
    assert p.positions == 3 + 2  # the prefill rows, then steps 1 and 2 (inputs still equal); not after
    assert [(m.step, m.kind) for m in p.mismatches] == [(2, "confident")]
    assert p.collapse_after(p.cand_tokens)["longest_run"] == 4 and p.notes == ["runs have 5 and 6 steps"]


def test_checksums():
    a = [REF, _onehot(1)]
    b = [REF.copy(), _onehot(1)]
    assert parity.checksum(a) == parity.checksum(b)
    b[0][2, 1] = np.nextafter(np.float32(0), np.float32(1))  # one ulp
    assert parity.checksum(a) != parity.checksum(b)
    assert parity.checksum([REF.astype(np.float16)]) != parity.checksum([REF])  # dtype counts


def _dump(path, steps):
    return write(path, [[("logits", torch.from_numpy(s))] for s in steps])


def test_command_on_dumps(tmp_path):
    ref = _dump(tmp_path / "ref", [REF, _onehot(2)])
    same = _dump(tmp_path / "same", [REF, _onehot(2)])
    cand = _dump(tmp_path / "cand", [CAND, _onehot(2)])
    res = CliRunner().invoke(command, [ref, same, "--json"])
    out = json.loads(res.output)
    assert res.exit_code == 0 and out["checksum"]["identical"] and out["tf_mismatch"] == 0
    res = CliRunner().invoke(command, [ref, cand, "--json"])
    out = json.loads(res.output)
    assert res.exit_code == 1 and (out["tf_mismatch"], out["near_tie"], out["confident"]) == (2, 1, 1)
    text = " ".join(CliRunner().invoke(command, [ref, cand]).output.split())  # unwrapped
    assert "tf_mismatch / near-tie / confident = 2 / 1 / 1" in text and "free run: the same 2 tokens" in text
    near = _dump(tmp_path / "near", [np.stack([CAND[0], REF[1], REF[2]]), _onehot(2)])
    assert CliRunner().invoke(command, [ref, near]).exit_code == 0  # a near-tie alone is within tolerance
    assert CliRunner().invoke(command, [ref, near, "--strict"]).exit_code == 1


@pytest.mark.parametrize("steps,extra,message", [
    ([REF[:2], _onehot(1)], [], "prefill logits [3, 4] vs [2, 4]: not the same token stream"),
    ([REF, REF], [], "a decode step holds logits [3, 4]: parity compares one request per run"),
    ([REF], ["--key", "nope"], "no key 'nope'"),
])
def test_bad_input_is_one_line(tmp_path, steps, extra, message):
    ref = _dump(tmp_path / "ref", [REF, _onehot(1)])
    res = CliRunner().invoke(command, [ref, _dump(tmp_path / "c", steps), *extra])
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_not_a_dump(tmp_path):
    res = CliRunner().invoke(command, [str(tmp_path / "nope"), str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such file or directory" in res.output
