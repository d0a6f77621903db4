"""compare() on synthetic dumps: alignment, thresholds, first divergence, culprit, ranks, one-sided keys."""
import pytest
import torch

from inkling_probe.compare import compare
from inkling_probe.errors import DumpError

from dumps import write, write_tp

G = torch.Generator().manual_seed(1)


def randn(*s):
    return torch.randn(*s, generator=G)


def chain(x, layers=4, fault=None, noise=0.0, dtype=torch.float32):
    """A toy residual net recorded with canonical-looking keys; ``fault(layer, key, t)`` may edit."""
    out = [("embed", x.to(dtype))]
    h = x
    ws = [torch.randn(16, 16, generator=torch.Generator().manual_seed(i)) / 4 for i in range(layers)]
    for i in range(layers):
        a = h @ ws[i]
        if fault:
            a = fault(i, "mlp.out", a)
        if noise:
            a = a + noise * a.std() * torch.randn(a.shape, generator=torch.Generator().manual_seed(100 + i))
        out.append((f"layers.{i}.mlp.out", a.to(dtype)))
        h = h + a
        out.append((f"layers.{i}.resid", h.to(dtype)))
    out.append(("logits", h.to(dtype)))
    return out


@pytest.fixture()
def x():
    return randn(8, 16)


def test_identical_dumps_are_exact(tmp_path, x):
    a = write(tmp_path / "a", [chain(x)])
    b = write(tmp_path / "b", [chain(x)])
    rep = compare(a, b)
    assert not rep.diverged and rep.culprit is None and rep.first_divergence is None
    assert {r.status for r in rep.rows} == {"exact"}
    assert [r.key for r in rep.rows][:3] == ["embed", "layers.0.mlp.out", "layers.0.resid"]


def test_planted_fault_is_culprit_and_first_divergence(tmp_path, x):
    def fault(i, key, a):
        return a * 1.05 if i == 2 else a
    a = write(tmp_path / "a", [chain(x)])
    b = write(tmp_path / "b", [chain(x, fault=fault)])
    rep = compare(a, b)
    assert rep.diverged
    assert rep.first_divergence.key == "layers.2.mlp.out"
    assert rep.culprit.key == "layers.2.mlp.out"
    later = rep.row("layers.3.mlp.out")
    assert later.diverged and later.jump < rep.culprit.jump
    f = rep.findings("layers.2.mlp.out")
    assert f and f[0]["hypothesis"] == "constant_ratio" and f[0]["evidence"]["ratio"] == pytest.approx(1.05)


def test_culprit_is_where_error_is_born_not_first_big(tmp_path, x):
    def fault(i, key, a):
        if i == 1:
            return a * (1 + 3e-5)  # just over the fp32 threshold: the first divergence
        if i == 2:
            return a * 2  # born here: a far larger jump
        return a
    a = write(tmp_path / "a", [chain(x)])
    b = write(tmp_path / "b", [chain(x, fault=fault)])
    rep = compare(a, b)
    assert rep.first_divergence.key == "layers.1.mlp.out"
    # two errors: the small one born first is the top culprit, not the larger jump after it; the
    # second is far beyond what its inputs carry: an independent culprit of its own
    assert [c.key for c in rep.culprits] == ["layers.1.mlp.out", "layers.2.mlp.out"]
    assert rep.culprits[0].born == "clean_inputs" and rep.culprits[1].born == "independent"
    assert rep.row("layers.2.mlp.out").jump > rep.culprits[0].jump


def test_bf16_candidate_within_dtype_defaults(tmp_path, x):
    a = write(tmp_path / "a", [chain(x)])
    b = write(tmp_path / "b", [chain(x, dtype=torch.bfloat16)])
    rep = compare(a, b)
    assert not rep.diverged, [(r.key, r.error, r.threshold) for r in rep.rows if r.diverged]
    assert all(r.error > 0 for r in rep.rows)


def test_control_sets_the_floor(tmp_path, x):
    a = write(tmp_path / "ref", [chain(x)])
    ctl = write(tmp_path / "ctl", [chain(x, noise=0.02)])  # benign: 2% noise everywhere
    ok = write(tmp_path / "ok", [chain(x, noise=0.03)])
    bad = write(tmp_path / "bad", [chain(x, noise=0.02, fault=lambda i, k, t: t * 1.5 if i == 1 else t)])
    assert compare(a, ok).diverged  # without a control, 3% noise in fp32 diverges
    rep = compare(a, ok, control=ctl)
    assert not rep.diverged
    r = rep.row("layers.0.mlp.out")
    assert r.floor == pytest.approx(0.02, rel=0.3) and r.threshold == pytest.approx(2 * r.floor)
    rep = compare(a, bad, control=ctl)
    assert rep.culprit.key == "layers.1.mlp.out"
    assert compare(a, ok, control=ctl, k=1.0).diverged  # k=1: 3% > 1 x 2%


def test_user_threshold_replaces_the_default(tmp_path, x):
    a = write(tmp_path / "a", [chain(x)])
    b = write(tmp_path / "b", [chain(x, noise=0.03)])
    rep = compare(a, b, threshold=0.2)
    assert not rep.diverged and {r.threshold for r in rep.rows if r.status != "exact"} == {0.2}
    assert compare(a, b).diverged  # fp32 default: 0.03 noise is far over it
    assert compare(a, b, threshold=0.01).diverged


def test_name_map_applies_to_both_sides(tmp_path, x):
    a = write(tmp_path / "a", [[("model.layers.0.mlp", x), ("model.norm", x)]])
    b = write(tmp_path / "b", [[("layers.0.mlp.out", x), ("norm", x)]])
    m = tmp_path / "map.toml"
    m.write_text("[[rule]]\nmatch = 'model\\.layers\\.(\\d+)\\.mlp'\nto = 'layers.\\1.mlp.out'\n"
                 "[[rule]]\nmatch = 'model\\.(.*)'\nto = '\\1'\n")
    rep = compare(a, b, name_map=str(m))
    assert [r.key for r in rep.rows] == ["layers.0.mlp.out", "norm"] and not rep.diverged
    assert rep.rows[0].ref_key == "model.layers.0.mlp"


def test_one_sided_keys_and_steps_are_listed(tmp_path, x):
    a = write(tmp_path / "a", [[("embed", x), ("only_ref", x)], [("embed", x)]])
    b = write(tmp_path / "b", [[("embed", x), ("only_cand", x)]])
    rep = compare(a, b)
    assert rep.only_ref == [("only_ref", 0), ("embed", 1)]
    assert rep.only_cand == [("only_cand", 0)]
    assert not rep.diverged


def test_no_common_key_is_bad_input(tmp_path, x):
    a = write(tmp_path / "a", [[("a", x)]])
    b = write(tmp_path / "b", [[("b", x)]])
    with pytest.raises(DumpError, match="no key in common"):
        compare(a, b)


def test_steps_align_and_order_is_the_references(tmp_path, x):
    a = write(tmp_path / "a", [[("p", x), ("q", x)], [("p", x), ("q", x)]])
    b = write(tmp_path / "b", [[("q", x), ("p", x)], [("q", x * 2), ("p", x)]])
    rep = compare(a, b)
    assert [(r.key, r.step) for r in rep.rows] == [("p", 0), ("q", 0), ("p", 1), ("q", 1)]
    assert rep.first_divergence.key == "q" and rep.first_divergence.step == 1


def test_token_prefix_when_runs_batch_differently(tmp_path):
    long = randn(32, 16)
    a = write(tmp_path / "a", [[("h", long[:16])]])
    b = write(tmp_path / "b", [[("h", long)]])
    rep = compare(a, b)
    assert not rep.diverged and (rep.rows[0].status == "exact" or rep.rows[0].error == 0)
    assert "tokens 0:16" in rep.rows[0].note
    c = write(tmp_path / "c", [[("h", torch.cat([long[:16], long[:16] * 0]))]])
    assert not compare(a, c).diverged


def test_token_slice_offsets_align_absolute_positions(tmp_path):
    full = randn(16, 8)
    a = write(tmp_path / "a", [[("h", full)]])
    b = write(tmp_path / "b", [[("h", full)]], tokens="4:12")
    rep = compare(a, b)
    assert not rep.diverged and "tokens 4:12" in rep.rows[0].note


def test_shape_mismatch_is_a_divergence(tmp_path, x):
    a = write(tmp_path / "a", [[("h", x)]])
    b = write(tmp_path / "b", [[("h", torch.zeros(3, 5))]])
    rep = compare(a, b)
    assert rep.rows[0].status == "shape" and rep.diverged and rep.culprit.key == "h"


def test_tp_shards_reassemble_and_compare_with_tp1(tmp_path, x):
    w = randn(16, 16)
    full = x @ w
    ref = write(tmp_path / "tp1", [[("h", x), ("q", full), ("o", full)]])
    ranks = []
    for r in range(2):
        cols = full[:, r * 8:(r + 1) * 8]
        part = x[:, r * 8:(r + 1) * 8] @ w[r * 8:(r + 1) * 8]
        ranks.append([[("h", x), ("q", cols, {"shard": "concat", "dim": 1}), ("o", part, {"shard": "partial"})]])
    cand = write_tp(tmp_path / "tp2", ranks)
    rep = compare(ref, cand)
    assert not rep.diverged, [(r.key, r.error) for r in rep.rows]
    assert rep.rank_findings == []


def test_a_rank_that_disagrees_on_a_replicated_tensor_is_reported(tmp_path, x):
    ref = write(tmp_path / "tp1", [[("h", x)]])
    cand = write_tp(tmp_path / "tp2", [[[("h", x)]], [[("h", x * 1.01)]]])
    rep = compare(ref, cand)
    assert rep.rows[0].status == "exact"  # the global view (rank 0) agrees ...
    f = rep.rank_findings
    assert len(f) == 1 and f[0]["rank"] == 1 and f[0]["dump"] == "candidate" and f[0]["diverged"]
    assert rep.diverged  # ... but the disagreeing rank is a finding that fails the comparison


def test_routing_changes_are_counted_once_and_set_aside_downstream(tmp_path):
    t = 16
    idx = torch.randint(0, 8, (t, 2), generator=G)
    out = randn(t, 16)
    flipped_idx = idx.clone()
    flipped_idx[3] = (idx[3] + 1) % 8
    flipped_out = out.clone()
    flipped_out[3] = randn(16)
    a = write(tmp_path / "a", [[("layers.2.mlp.topk_idx", idx), ("layers.2.mlp.experts", out)]])
    b = write(tmp_path / "b", [[("layers.2.mlp.topk_idx", flipped_idx), ("layers.2.mlp.experts", flipped_out)]])
    decl = ["*.topk_idx"]
    rep = compare(a, b, threshold=0.1, decisions=decl)  # one row of 16 changed: 6% <= 10% (no scores)
    assert rep.row("layers.2.mlp.topk_idx").error == pytest.approx(1 / 16)
    experts = rep.row("layers.2.mlp.experts")
    assert experts.error == 0 and "set aside" in experts.note and not rep.diverged
    assert compare(a, b, threshold=0.05, decisions=decl).row("layers.2.mlp.topk_idx").diverged
    undeclared = compare(a, b).row("layers.2.mlp.topk_idx")  # integers alone are no decision
    assert not undeclared.decision and undeclared.diverged


def test_a_changed_decode_token_counts_against_all_rows_so_far(tmp_path):
    idx = torch.randint(0, 8, (16, 2), generator=G)
    tok = torch.tensor([[1, 2]])
    a = write(tmp_path / "a", [[("layers.2.mlp.topk_idx", idx)], [("layers.2.mlp.topk_idx", tok)]])
    b = write(tmp_path / "b", [[("layers.2.mlp.topk_idx", idx)], [("layers.2.mlp.topk_idx", tok + 1)]])
    rep = compare(a, b, threshold=0.1, decisions=["*.topk_idx"])
    row = rep.row("layers.2.mlp.topk_idx", step=1)
    assert row.error == pytest.approx(1 / 17) and not rep.diverged and "1 of 17" in row.note


def test_control_only_keys_compare_against_the_control(tmp_path, x):
    scale = torch.tensor([0.5, 0.25])
    ref = write(tmp_path / "ref", [[("layers.3.mlp.experts", x)]])
    ctl = write(tmp_path / "ctl", [[("layers.3.mlp.experts.input_scale", scale), ("layers.3.mlp.experts", x)]])
    cand = write(tmp_path / "cand", [[("layers.3.mlp.experts.input_scale", scale * 2688),
                                      ("layers.3.mlp.experts", x * 0)]])
    rep = compare(ref, cand, control=ctl)
    assert rep.culprit.key == "layers.3.mlp.experts"
    (row,) = rep.control_rows
    assert row.key == "layers.3.mlp.experts.input_scale" and row.against == "control" and row.diverged
    scale_findings = rep.findings("layers.3.mlp.experts.input_scale")
    assert scale_findings[0]["evidence"]["matches"][0] == "2688 = 6*448"
    assert rep.findings("layers.3.mlp.experts")[0]["hypothesis"] == "zeroed"


def test_nan_onset_is_the_culprit(tmp_path, x):
    bad = x.clone()
    bad[5, 2] = float("nan")
    a = write(tmp_path / "a", [[("a", x), ("b", x), ("c", x)]])
    b = write(tmp_path / "b", [[("a", x), ("b", bad), ("c", bad)]])
    rep = compare(a, b)
    assert rep.culprit.key == "b"
    f = rep.findings("b")
    assert f[0]["hypothesis"] == "nonfinite" and f[0]["evidence"]["first_index"] == [5, 2]


def test_include_and_steps_filters(tmp_path, x):
    a = write(tmp_path / "a", [[("p", x), ("q", x)], [("p", x), ("q", x)]])
    b = write(tmp_path / "b", [[("p", x), ("q", x * 2)], [("p", x), ("q", x)]])
    assert not compare(a, b, include="p").diverged
    assert not compare(a, b, steps={1}).diverged
    assert compare(a, b, steps={0}).diverged


def test_decision_flipped_by_an_upstream_error_is_not_the_culprit():
    """The demo's case: the NVFP4 experts diverge a little (born there), and the next layer's
    router flips a few tokens' experts, a big 'jump' that only measures the flip."""
    from inkling_probe.compare.divergence import attribute, culprit
    from inkling_probe.compare.report import Row

    def row(key, layer, score, dtype):
        return Row(key=key, step=0, call=0, layer=layer, ref_dtype=dtype, score=score,
                   status="diverged" if score > 1 else "ok")

    rows = [row("layers.3.mlp_norm", 3, 0.3, "bfloat16"), row("layers.3.mlp.experts", 3, 1.2, "bfloat16"),
            row("layers.3.resid", 3, 1.3, "bfloat16"), row("layers.4.mlp.topk_idx", 4, 2.5, "int64"),
            row("layers.4.resid", 4, 1.6, "bfloat16")]
    attribute(rows)
    assert culprit(rows).key == "layers.3.mlp.experts"
    clean = [row("layers.4.mlp.router_logits", 4, 0.2, "float32"), row("layers.4.mlp.topk_idx", 4, 3.0, "int64")]
    attribute(clean)
    assert culprit(clean).key == "layers.4.mlp.topk_idx"  # changed with its inputs in tolerance: born here
