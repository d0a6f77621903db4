"""``inkling-probe parity`` on real runs of one checkpoint: fp32 vs bf16 gives near-ties and confident
mismatches, reported apart; two identical fp32 runs give identical checksums and no mismatch."""

import json

import pytest
from click.testing import CliRunner

from inkling_model.cli.run import command as run
from inkling_model.config import InklingConfig
from inkling_probe.cli.parity import command as parity

STREAM = ",".join(str((i * 37 + 11) % 512) for i in range(200))  # 200 teacher-forced positions


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    root = tmp_path_factory.mktemp("parity")
    ckpt = str(write_random_checkpoint(InklingConfig.preset("tiny"), root / "ck", seed=0))
    out = {}
    for name, dtype in (("fp32", "fp32"), ("fp32_again", "fp32"), ("bf16", "bf16")):
        out[name] = str(root / name)
        args = ["--ckpt", ckpt, "--tokens", STREAM, "--max-new-tokens", "16", "--dtype", dtype, "--dump", out[name]]
        assert CliRunner().invoke(run, args).exit_code == 0
    return out


def _parity(a, b):
    res = CliRunner().invoke(parity, [a, b, "--json"])
    return res.exit_code, json.loads(res.output)


def test_fp32_vs_bf16_near_ties_and_confident_apart(runs):
    code, out = _parity(runs["fp32"], runs["bf16"])
    print(f"\nfp32 vs bf16, {out['positions']} positions: tf_mismatch / near-tie / confident = "
          f"{out['tf_mismatch']} / {out['near_tie']} / {out['confident']}, free run diverged at "
          f"{out['free_run']['diverged_at']}")
    assert out["near_tie"] > 0 and out["confident"] > 0
    assert out["tf_mismatch"] == out["near_tie"] + out["confident"] == len(out["mismatches"])
    assert all((m["kind"] == "near_tie") == (m["ref_margin"] < m["threshold"]) for m in out["mismatches"])
    assert out["free_run"]["diverged_at"] is not None and not out["checksum"]["identical"]
    assert code == 1  # confident mismatches


def test_identical_runs_identical_checksums(runs):
    code, out = _parity(runs["fp32"], runs["fp32_again"])
    assert code == 0 and out["checksum"]["identical"] and out["checksum"]["ref"] == out["checksum"]["cand"]
    assert out["tf_mismatch"] == 0 and out["free_run"]["diverged_at"] is None and out["positions"] >= 200
