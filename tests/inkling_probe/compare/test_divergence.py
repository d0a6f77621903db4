"""Attribution rules of compare v2 on planted cases with known answers, and their benign twins:
the culprit is where the error is born, which is not always the first divergence, the largest
error or the largest jump (compare/divergence.py, walker.py, decisions.py)."""
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from inkling_probe.cli import group
from inkling_probe.compare import compare

from dumps import write

G = torch.Generator().manual_seed(7)


def randn(*s):
    return torch.randn(*s, generator=G)


def noisy(t, level, seed):
    return t + level * t.std() * torch.randn(t.shape, generator=torch.Generator().manual_seed(seed))


def test_downstream_amplifier_does_not_steal_the_culprit(tmp_path):
    x, h = randn(16, 32), randn(16, 32)
    ref = [("embed", x), ("layers.1.mlp.out", h), ("layers.2.renorm", h * 2), ("layers.3.mlp.out", h)]
    bad = h * 1.05
    amplified = h * 2 + (bad - h) * 2 * 3  # the renorm triples the relative error it receives
    cand = [("embed", x), ("layers.1.mlp.out", bad), ("layers.2.renorm", amplified), ("layers.3.mlp.out", bad)]
    rep = compare(write(tmp_path / "r", [ref]), write(tmp_path / "c", [cand]))
    culprit, amp = rep.culprit, rep.row("layers.2.renorm")
    assert culprit.key == "layers.1.mlp.out"
    assert amp.jump > culprit.jump / culprit.score * 2 and amp.error > culprit.error  # bigger error, bigger rise
    assert [c.key for c in rep.culprits] == ["layers.1.mlp.out"]


def test_error_born_under_its_allowance_is_blamed_where_it_rose(tmp_path):
    """Culprit != first divergence: a fault at 1.5x the control's noise (score 0.75) is amplified
    downstream past the allowance; the first divergence is its consequence."""
    x, h1, h2 = randn(16, 32), randn(16, 32), randn(16, 32)
    ref = [("embed", x), ("layers.1.mlp.out", h1), ("layers.2.mlp.out", h2)]
    ctl = [("embed", x), ("layers.1.mlp.out", noisy(h1, 0.01, 1)), ("layers.2.mlp.out", noisy(h2, 0.01, 2))]
    cand = [("embed", x), ("layers.1.mlp.out", noisy(h1, 0.016, 3)), ("layers.2.mlp.out", noisy(h2, 0.05, 4))]
    rep = compare(write(tmp_path / "r", [ref]), write(tmp_path / "c", [cand]), control=write(tmp_path / "k", [ctl]))
    assert rep.first_divergence.key == "layers.2.mlp.out"
    assert rep.culprit.key == "layers.1.mlp.out" and rep.culprit.born == "below_allowance"
    assert not rep.culprit.diverged
    # twin: the same layer-1 level as the control's (no rise) leaves the culprit at the divergence
    cand2 = [("embed", x), ("layers.1.mlp.out", noisy(h1, 0.01, 3)), ("layers.2.mlp.out", noisy(h2, 0.05, 4))]
    rep2 = compare(write(tmp_path / "r2", [ref]), write(tmp_path / "c2", [cand2]), control=write(tmp_path / "k2", [ctl]))
    assert rep2.culprit.key == "layers.2.mlp.out" and rep2.culprit.born == "clean_inputs"


def test_independent_divergences_are_each_a_culprit_and_each_explained(tmp_path):
    a, w, r = randn(16, 32), randn(64, 32), randn(32, 32)
    fine = [(f"layers.{i}.x", randn(8, 8)) for i in range(6)]
    ref_steps = [fine[0], ("layers.1.a", a), fine[2], ("layers.3.w13", w), fine[4], ("layers.5.rows", r), fine[5]]
    inter = torch.cat([w[0::2], w[1::2]])  # interleaved rows read as [gate; up]
    rows = r.clone()
    rows[[5, 9]] *= 3.0
    cand_steps = [fine[0], ("layers.1.a", a * 448), fine[2], ("layers.3.w13", inter), fine[4],
                  ("layers.5.rows", rows), fine[5]]
    rep = compare(write(tmp_path / "r", [ref_steps]), write(tmp_path / "c", [cand_steps]))
    assert [c.key for c in rep.culprits] == ["layers.1.a", "layers.3.w13", "layers.5.rows"]
    kinds = {c.key: {f.get("kind") for f in c.findings} for c in rep.culprits}
    assert "ratio" in kinds["layers.1.a"] and "permutation" in kinds["layers.3.w13"]
    assert "confined" in kinds["layers.5.rows"]
    rows_finding = next(f for f in rep.row("layers.5.rows").findings if f.get("kind") == "confined")
    assert rows_finding["evidence"]["indices"] == [5, 9]


def test_a_few_rows_are_judged_on_their_own(tmp_path):
    """Two token rows of 64 off by 20% are 3.5% over the tensor: under bf16's default, caught per row."""
    h = randn(64, 128)
    bad = h.clone()
    bad[[3, 40]] *= 1.2
    ref, cand = write(tmp_path / "r", [[("layers.1.attn_norm", h.bfloat16())]]), \
        write(tmp_path / "c", [[("layers.1.attn_norm", bad.bfloat16())]])
    rep = compare(ref, cand)
    row = rep.row("layers.1.attn_norm")
    assert row.error < row.threshold  # the tensor-wide error alone would pass
    assert row.diverged and row.bad_rows == [3, 40] and rep.culprit.key == "layers.1.attn_norm"
    benign = write(tmp_path / "b", [[("layers.1.attn_norm", noisy(h, 0.004, 9).bfloat16())]])
    assert not compare(ref, benign).diverged  # bf16-sized noise on every row: nothing


def test_earliest_decode_step_is_the_culprit_not_the_largest(tmp_path):
    h = [randn(1, 32) for _ in range(4)]
    ref = [[("layers.0.o_proj", t)] for t in h]
    cand = [[("layers.0.o_proj", t * (1.0 if s < 1 else 1.0 + 0.01 * s))] for s, t in enumerate(h)]
    rep = compare(write(tmp_path / "r", ref), write(tmp_path / "c", cand))
    assert (rep.culprit.key, rep.culprit.step) == ("layers.0.o_proj", 1)
    assert rep.row("layers.0.o_proj", step=3).error > rep.culprit.error


# --- routing decisions ---------------------------------------------------------------------------------
def _routing(tmp_path, name, ids, logits, out):
    meta = {"kind": "decision", "scores": "layers.2.mlp.router_logits"}
    return write(tmp_path / name, [[("layers.2.mlp.router_logits", logits), ("layers.2.mlp.topk_idx", ids, meta),
                                    ("layers.2.mlp.experts", out)]])


def test_near_tie_flip_is_benign_and_a_clear_flip_is_the_culprit(tmp_path):
    logits, nudged = near_tie_logits(3)
    ids = torch.topk(logits, 2, dim=-1).indices
    out = randn(8, 16)
    ref = _routing(tmp_path, "r", ids, logits, out)
    flipped = torch.topk(nudged, 2, dim=-1).indices
    assert not torch.equal(flipped.sort(-1).values, ids.sort(-1).values)
    changed_out = out.clone()
    changed_out[3] = randn(16)
    near = _routing(tmp_path, "n", flipped, nudged, changed_out)
    rep = compare(ref, near, threshold=1e-2)
    row = rep.row("layers.2.mlp.topk_idx")
    assert row.decision and "near-tie" in row.note and not row.diverged
    assert "set aside" in rep.row("layers.2.mlp.experts").note and not rep.diverged
    # clear: the same ids change with the router's scores untouched (a broken top-k / bias)
    clear = _routing(tmp_path, "c", flipped, logits, changed_out)
    rep2 = compare(ref, clear, threshold=1e-2)
    assert rep2.culprit.key == "layers.2.mlp.topk_idx" and rep2.culprit.clear_flips == 1


def near_tie_logits(t):
    """Router logits whose token ``t`` has its 2nd and 3rd experts 5e-4 apart, and a candidate
    whose noise (1e-3 on those two) swaps them."""
    logits = randn(8, 6)
    o = torch.argsort(logits[t], descending=True)
    logits[t, o[2]] = logits[t, o[1]] - 5e-4
    nudged = logits.clone()
    nudged[t, o[2]] += 1e-3
    nudged[t, o[1]] -= 1e-3
    return logits, nudged


def test_ids_in_another_order_are_the_same_decision(tmp_path):
    logits = randn(8, 6)
    ids = torch.topk(logits, 2, dim=-1).indices
    out = randn(8, 16)
    rep = compare(_routing(tmp_path, "r", ids, logits, out), _routing(tmp_path, "c", ids.flip(-1), logits, out))
    assert not rep.diverged and rep.row("layers.2.mlp.topk_idx").error == 0


def test_dispatch_order_rows_after_a_flip_are_not_compared_by_index(tmp_path):
    logits, nudged = near_tie_logits(1)
    ids = torch.topk(logits, 2, dim=-1).indices
    meta = {"kind": "decision", "scores": "layers.2.mlp.router_logits"}
    disp = randn(16, 4)  # [T*k, ...] rows in dispatch order
    ref = write(tmp_path / "r", [[("layers.2.mlp.router_logits", logits), ("layers.2.mlp.topk_idx", ids, meta),
                                  ("layers.2.mlp.dispatched", disp)]])
    cand = write(tmp_path / "c", [[("layers.2.mlp.router_logits", nudged),
                                   ("layers.2.mlp.topk_idx", torch.topk(nudged, 2, -1).indices, meta),
                                   ("layers.2.mlp.dispatched", disp.roll(2, 0))]])
    rep = compare(ref, cand, threshold=1e-2)
    assert rep.row("layers.2.mlp.dispatched").status == "not_comparable" and not rep.diverged
    assert rep.unchecked  # never "within tolerance": the CLI exits 125 (inconclusive) and says so
    r = CliRunner().invoke(group, ["compare", ref, cand, "--threshold", "0.01"])
    assert r.exit_code == 125 and "could not check" in r.output


def test_different_call_counts_are_not_comparable(tmp_path):
    x = randn(4, 8)
    ref = write(tmp_path / "r", [[("layers.1.experts.act", x), ("layers.1.experts.act", x), ("layers.1.out", x)]])
    cand = write(tmp_path / "c", [[("layers.1.experts.act", x), ("layers.1.out", x)]])
    rep = compare(ref, cand)
    assert {r.status for r in rep.rows if r.key == "layers.1.experts.act"} == {"not_comparable"}
    assert not rep.diverged and rep.row("layers.1.out").status == "exact"


# --- thresholds from evidence -----------------------------------------------------------------------
def test_a_control_lowers_the_allowance_below_the_dtype_default(tmp_path):
    """bf16 with a control: a uniform 3% fault is found where the bf16 default (0.04+) would pass it."""
    h, x = randn(32, 64), randn(32, 64)
    ref = write(tmp_path / "r", [[("embed", x), ("layers.3.mlp.out", h)]])
    ctl = write(tmp_path / "k", [[("embed", x.bfloat16()), ("layers.3.mlp.out", h.bfloat16())]])
    cand = write(tmp_path / "c", [[("embed", x.bfloat16()), ("layers.3.mlp.out", (h * 1.03).bfloat16())]])
    assert not compare(ref, cand).diverged  # without the control the default hides it
    rep = compare(ref, cand, control=ctl)
    row = rep.row("layers.3.mlp.out")
    rounding = 2 * 2 ** -8 / 3 ** 0.5  # 2 x the rms of rounding to bf16: the minimum under a control
    assert row.threshold == pytest.approx(max(2 * row.floor, rounding)) and row.threshold < 0.03
    assert rep.culprit.key == "layers.3.mlp.out"
    twin = write(tmp_path / "t", [[("embed", x.bfloat16()), ("layers.3.mlp.out", noisy(h, 0.001, 5).bfloat16())]])
    assert not compare(ref, twin, control=ctl).diverged


def test_a_control_exact_at_a_key_leaves_the_dtype_default_there(tmp_path):
    x = randn(16, 32)
    ref = write(tmp_path / "r", [[("layers.0.attn.o_proj", x.bfloat16())]])
    ctl = write(tmp_path / "k", [[("layers.0.attn.o_proj", x.bfloat16())]])
    cand = write(tmp_path / "c", [[("layers.0.attn.o_proj", noisy(x, 0.004, 3).bfloat16())]])  # TP-like bf16 noise
    row = compare(ref, cand, control=ctl).row("layers.0.attn.o_proj")
    assert row.floor == 0 and not row.diverged and row.threshold > 0.01


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_bad_threshold_is_bad_input(tmp_path, value):
    a = write(tmp_path / "a", [[("h", randn(2, 2))]])
    r = CliRunner().invoke(group, ["compare", a, a, "--threshold", value])
    assert r.exit_code == 2 and "--threshold" in r.output


# --- batch and layout alignment ----------------------------------------------------------------------
def test_batch_row_and_flattened_tokens_align_with_a_single_prompt(tmp_path):
    t, h = 6, 8
    single = randn(1, t, h)
    batch = torch.cat([randn(2, t, h), single, randn(1, t, h)])  # the prompt is row 2 of 4
    ref = write(tmp_path / "r", [[("hidden", single, {"token_dim": 1, "batch_dim": 0}),
                                  ("moe", single.reshape(t, h), {"token_dim": 0})]])
    cand = write(tmp_path / "c", [[("hidden", batch, {"token_dim": 1, "batch_dim": 0}),
                                   ("moe", batch.reshape(4 * t, h), {"token_dim": 0, "batch": 4})]])
    rep = compare(ref, cand, cand_row=2)
    assert not rep.diverged and {r.status for r in rep.rows} == {"exact"}
    assert compare(ref, cand, cand_row=1).diverged


def test_record_writes_honest_token_dims(tmp_path):
    import inkling_probe

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 8)
            self.lin = torch.nn.Linear(8, 8)
            self.stacked = torch.nn.Identity()

        def forward(self, ids):
            h = self.emb(ids)  # [B, T, H]
            flat = self.lin(h.reshape(-1, 8))  # [B*T, H]
            self.stacked(torch.stack([flat, -flat]))  # [2, B*T, H]: two experts' work stacked
            return flat.reshape(h.shape)

    ids = torch.randint(0, 50, (3, 5))
    with inkling_probe.record(Toy(), str(tmp_path / "d"), writer="inline"):
        Toy.forward  # noqa: B018
    d = str(tmp_path / "d2")
    m = Toy()
    with torch.no_grad(), inkling_probe.record(m, d, writer="inline"):
        inkling_probe.step()
        m(ids)
    dump = inkling_probe.open(d)
    emb, lin = dump.rows("emb")[0], dump.rows("lin")[0]
    assert emb["token_dim"] == 1 and emb["meta"]["batch_dim"] == 0
    assert lin["token_dim"] == 0 and lin["meta"]["batch"] == 3
    stacked = dump.rows("stacked")[0]
    assert stacked["token_dim"] == 1 and stacked["meta"]["batch"] == 3
    assert np.array_equal(dump.array("in.0") if "in.0" in dump.keys() else ids.numpy(), ids.numpy())


def test_json_names_every_culprit(tmp_path):
    x = randn(8, 8)
    ref = write(tmp_path / "r", [[("layers.1.a", x), ("layers.2.b", x), ("layers.3.c", x)]])
    cand = write(tmp_path / "c", [[("layers.1.a", x * 2), ("layers.2.b", x * 0 + 0.5), ("layers.3.c", x)]])
    r = CliRunner().invoke(group, ["compare", ref, cand, "--json"])
    doc = json.loads(r.output)
    assert r.exit_code == 1 and [c["key"] for c in doc["culprits"]][0] == "layers.1.a"
    assert doc["culprit"]["key"] == "layers.1.a"
