"""Independent errors without recorded inputs (compare/relations.py): an engine instrumented by hand
with ``probe()`` records no module inputs, so feeders are guessed from order; a key is still its own
culprit when it holds an exact relation to the reference that its guessed feeders' errors do not show."""
import pytest
import torch

from inkling_probe.compare import compare

from dumps import write

T, H, I = 16, 32, 24


def _weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(*s, generator=g) / s[0] ** 0.5 for n, s in
            (("wq", (H, H)), ("wk", (H, H)), ("wv", (H, H)), ("wo", (H, H)), ("w13", (H, 2 * I)), ("w2", (I, H)))}


def _rms(x):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def engine(x, layers=3, record=None, compute=None):
    """A hand-instrumented forward: ``record[key](t)`` changes what is written through the sink,
    ``compute[key](t)`` what the engine computes with (a fault in the engine itself)."""
    record, compute = record or {}, compute or {}
    w, out = _weights(), [("embed", x)]
    keep = lambda key, t: (compute.get(key, lambda v: v)(t))

    def probe(key, t):
        t = keep(key, t)
        out.append((key, record.get(key, lambda v: v)(t)))
        return t

    h = x
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(layers):
        n = probe(f"layers.{i}.attn_norm", _rms(h))
        q, k, v = (probe(f"layers.{i}.attn.{s}", n @ w[f"w{s}"]) for s in "qkv")
        a = probe(f"layers.{i}.attn.out", torch.softmax(q @ k.T / H ** 0.5 + mask, -1) @ v)
        h = probe(f"layers.{i}.resid_attn", h + probe(f"layers.{i}.attn.o_proj", a @ w["wo"]))
        n = probe(f"layers.{i}.mlp_norm", _rms(h))
        gu = probe(f"layers.{i}.mlp.w13", n @ w["w13"])  # [T, 2I] as [gate; up]
        act = probe(f"layers.{i}.mlp.act", torch.nn.functional.silu(gu[:, :I]) * gu[:, I:])
        h = probe(f"layers.{i}.resid", h + probe(f"layers.{i}.mlp.out", act @ w["w2"]))
    probe("norm", _rms(h))
    return out


def _interleave(t):
    """[gate; up] columns written as the engine's own [g0, u0, g1, u1, ...]."""
    return torch.stack([t[:, :I], t[:, I:]], -1).reshape(t.shape)


def _rows(t, rows=(5, 9), by=1.5):
    t = t.clone()
    t[list(rows)] *= by
    return t


X = torch.randn(T, H, generator=torch.Generator().manual_seed(1))


def test_three_unrelated_faults_through_probe_are_three_culprits_each_explained(tmp_path):
    ref = write(tmp_path / "r", [engine(X)])
    faults = {"layers.1.attn.q": lambda t: t * 448, "layers.1.mlp.w13": _interleave, "layers.1.mlp.out": _rows}
    cand = write(tmp_path / "c", [engine(X, record=faults)])
    rep = compare(ref, cand)
    assert [c.key for c in rep.culprits] == list(faults)
    assert [c.born for c in rep.culprits] == ["clean_inputs", "own_relation", "own_relation"]
    kinds = {c.key: {f["kind"] for f in c.findings} for c in rep.culprits}
    assert "ratio" in kinds["layers.1.attn.q"] and "permutation" in kinds["layers.1.mlp.w13"]
    rows = [f for f in rep.row("layers.1.mlp.out").findings if f["kind"] == "confined"]
    assert rows[0]["evidence"]["indices"] == [5, 9]
    assert "do not show it" in rep.row("layers.1.mlp.w13").note
    # the same faults without the first: the others were never hidden by their jump alone
    rep2 = compare(ref, write(tmp_path / "c2", [engine(X, record={k: faults[k] for k in list(faults)[1:]})]))
    assert [c.key for c in rep2.culprits] == list(faults)[1:]


def test_an_inherited_relation_is_not_a_second_culprit(tmp_path):
    """A scale the engine computes with passes through a linear op exactly (v -> attention output ->
    o_proj scaled alike): the ratio downstream is the feeder's, one culprit."""
    ref = write(tmp_path / "r", [engine(X, layers=2)])
    rep = compare(ref, write(tmp_path / "c", [engine(X, layers=2, compute={"layers.1.attn.v": lambda t: t * 448})]))
    assert rep.row("layers.1.attn.o_proj").diverged
    assert [c.key for c in rep.culprits] == ["layers.1.attn.v"]


def test_rows_off_in_the_engine_spread_causally_and_stay_one_culprit(tmp_path):
    """Rows 5 and 9 wrong in the computation reach tokens >= 5 through attention: every downstream
    key confined to those tokens is the fault's consequence."""
    ref = write(tmp_path / "r", [engine(X, layers=2)])
    rep = compare(ref, write(tmp_path / "c", [engine(X, layers=2, compute={"layers.0.attn_norm": _rows})]))
    assert [c.key for c in rep.culprits] == ["layers.0.attn_norm"]
    assert all(r.born != "own_relation" for r in rep.rows)


def test_rows_off_where_the_feeder_is_exact_before_them_but_spread_after(tmp_path):
    """The feeder is off on every row from token 3 on (computed), and a later key's recorded rows 1
    and 2 are off with the rest exact: rows before the feeder's error cannot be its consequence."""
    ref = write(tmp_path / "r", [engine(X, layers=1)])
    late = lambda t: _rows(t, rows=range(3, T), by=1.2)
    cand = engine(X, layers=1, compute={"layers.0.attn_norm": late}, record={"layers.0.mlp.act": lambda t: t})
    # the recorded act: the reference's, rows 1 and 2 changed (an engine writing the wrong rows)
    ref_act = dict(engine(X, layers=1))["layers.0.mlp.act"]
    cand = [(k, _rows(ref_act, rows=(1, 2), by=2.0) if k == "layers.0.mlp.act" else t) for k, t in cand]
    rep = compare(ref, write(tmp_path / "c", [cand]))
    assert [c.key for c in rep.culprits] == ["layers.0.attn_norm", "layers.0.mlp.act"]


def _noisy(t, seed, by=1e-2):
    return t + by * t.abs().mean() * torch.randn(t.shape, generator=torch.Generator().manual_seed(seed))


def _explaining(monkeypatch, ref, cand):
    """compare's report with the screen on and off, and the rows relations read again in each."""
    from inkling_probe.compare import diagnose, relations

    explained = []
    real = diagnose.explain_row
    monkeypatch.setattr(diagnose, "explain_row", lambda row, *a, **k: explained.append(row.key) or real(row, *a, **k))
    on = compare(ref, cand, explain=False, jobs=1).to_dict()
    n_on = len(explained)
    monkeypatch.setattr(relations, "_settled", lambda *a: False)
    off = compare(ref, cand, explain=False, jobs=1).to_dict()
    return on, off, n_on, len(explained) - n_on


@pytest.mark.parametrize("faults", ["noise", "three", "rows"])
def test_the_relations_screen_changes_no_report(tmp_path, monkeypatch, faults):
    """relations.mark explains a row only when a relation is left open; with the screen off (every
    candidate row explained) the same report comes out: marks, notes, everything."""
    record = {"noise": {}, "three": {"layers.1.attn.q": lambda t: t * 448, "layers.1.mlp.w13": _interleave,
                                     "layers.1.mlp.out": _rows},
              "rows": {}}[faults]
    ref = write(tmp_path / "r", [engine(X, layers=2)])
    cand = engine(X, layers=2, record=record,
                  compute={"layers.0.attn_norm": _rows} if faults == "rows" else None)
    if faults == "noise":
        cand = [(k, _noisy(t, i)) for i, (k, t) in enumerate(cand)]
    on, off, n_on, n_off = _explaining(monkeypatch, ref, write(tmp_path / "c", [cand]))
    assert on == off and n_on <= n_off


def test_large_rows_off_by_noise_everywhere_are_not_read_again(tmp_path, monkeypatch):
    """Keys of 128K values each off by noise (every row and position, far from parallel, the rms kept
    by the feeders): settled from the walk's sums, none read again; the same report as explaining them."""
    g = torch.Generator().manual_seed(2)
    keys = [("embed", torch.randn(256, 512, generator=g))]
    for i in range(4):
        keys.append((f"layers.{i}.out", torch.tanh(keys[-1][1]) + 0.1 * torch.randn(256, 512, generator=g)))
    ref = write(tmp_path / "r", [keys])
    cand = write(tmp_path / "c", [[(k, _noisy(t, 100 + i, 3e-4)) for i, (k, t) in enumerate(keys)]])
    on, off, n_on, n_off = _explaining(monkeypatch, ref, cand)
    assert on == off
    assert n_on == 0 < n_off
