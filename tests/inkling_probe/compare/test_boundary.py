"""One modality judged (compare --rows KIND, compare/boundary.py): error a causal short conv or attention
carries from image/audio rows into the text rows next to them is a consequence, not a text birth; a
fault of the text rows themselves is still named (issue 41 item 6B)."""
import torch

from inkling_probe.compare import compare, modality

from dumps import write

T, H, K = 14, 16, 3
MEDIA = [["audio", 0, 3, 2], ["image", 0, 5, 6]]  # rows 3..4 audio, 5..10 image; 0..2 and 11..13 text
IMAGE, AUDIO = list(range(5, 11)), [3, 4]
TEXT = [0, 1, 2, 11, 12, 13]


def _weights():
    g = torch.Generator().manual_seed(0)
    return {"emb": torch.randn(T, H, generator=g), "media": torch.randn(T, H, generator=g),
            "w": [torch.randn(H, H, generator=g) / H ** 0.5 for _ in range(2)],
            "conv": [torch.randn(K, H, generator=g) / K ** 0.5 for _ in range(2)]}


def _rms(x):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def _sconv(x, w):
    """Causal depthwise conv over token rows: row t reads rows t-K+1..t."""
    pad = torch.cat([torch.zeros(K - 1, x.shape[1]), x])
    return sum(w[j] * pad[K - 1 - j: K - 1 - j + x.shape[0]] for j in range(K))


def _run(faults=None, noise=2e-7, seed=1):
    """One prefill of a 2-layer toy: the fused stream (media rows scattered in), then per layer norm,
    a row-wise projection, a causal short conv (``mlp_sconv``), causal mean attention and residuals.
    ``faults[key](t)``: what that key computes (the engine goes on with it)."""
    faults, w = faults or {}, _weights()
    g = torch.Generator().manual_seed(seed)
    out = []

    def rec(key, t, **kw):
        t = faults.get(key, lambda v: v)(t)
        out.append((key, t * (1 + noise * torch.randn(t.shape, generator=g)), kw))
        return t

    h = rec("embed", w["emb"])
    media = torch.zeros(T, 1, dtype=torch.bool)
    media[3:11] = True
    h = rec("fused", torch.where(media, w["media"], h), media=MEDIA)
    for i in range(2):
        p = f"layers.{i}"
        x = rec(f"{p}.mlp.out", _rms(h) @ w["w"][i])
        h = rec(f"{p}.resid_mlp", h + rec(f"{p}.mlp_sconv", _sconv(x, w["conv"][i])))
        a = rec(f"{p}.attn.out", torch.cumsum(_rms(h), 0) / torch.arange(1, T + 1)[:, None])
        h = rec(f"{p}.resid", h + a)
    return [out]


def _rows(rows, by):
    def f(t):
        t = t.clone()
        t[rows] = t[rows] * by
        return t
    return f


def _rolled(rows):
    """Those rows' features read in another order (as a tower's fold order bug)."""
    def f(t):
        t = t.clone()
        t[rows] = t[rows].roll(1, -1)
        return t
    return f


def _text(tmp_path, faults):
    ref, cand = write(tmp_path / "r", _run()), write(tmp_path / "c", _run(faults, seed=2))
    import inkling_probe
    r, c = inkling_probe.open(ref), inkling_probe.open(cand)
    return compare(modality.view(r, "text", c), modality.view(c, "text", r), jobs=1, explain=False)


def test_a_media_only_fault_is_no_text_culprit(tmp_path):
    """The image rows' features rolled at the fusion: the text rows after them go wrong at the short
    conv (their inputs in the text view are clean). Before: layers.0.mlp_sconv, a text culprit born there."""
    rep = _text(tmp_path, {"fused": _rolled(IMAGE)})
    assert rep.diverged and rep.culprits == []
    assert rep.row("layers.0.mlp_sconv").status == "diverged" and not rep.row("layers.0.mlp_sconv").born
    note = next(n for n in rep.notes if n.startswith("text rows carry error"))
    assert "layers.0.mlp_sconv's text rows [11..12]" in note and "image 0's rows [5..10]" in note
    assert "off from fused" in note


def test_an_audio_fault_carried_by_attention_is_no_text_culprit(tmp_path):
    rep = _text(tmp_path, {"fused": _rolled(AUDIO)})
    assert rep.diverged and rep.culprits == []
    note = next(n for n in rep.notes if n.startswith("text rows carry error"))
    assert "layers.0.attn.out's text rows [11..13]" in note and "audio 0's rows [3..4]" in note


def test_a_text_fault_at_the_short_conv_is_still_named(tmp_path):
    """Every text row x1.2 at the conv (rows before the media too), or only those after it: named."""
    for rows in (TEXT, [11, 12, 13]):
        rep = _text(tmp_path / str(len(rows)), {"layers.0.mlp_sconv": _rows(rows, 1.2)})
        assert [(c.key, c.born) for c in rep.culprits][:1] == [("layers.0.mlp_sconv", "clean_inputs")]
        assert not any(n.startswith("text rows carry error") for n in rep.notes)


def test_a_text_fault_larger_than_what_the_media_carries_is_named(tmp_path):
    """Beside a media fault, a text fault on the rows after the media is named where it exceeds SPREAD x
    the media rows' own error (rolled: ~1.4, relative); x3 (2 relative) would be taken as carried."""
    rep = _text(tmp_path, {"fused": _rolled(IMAGE), "layers.0.mlp_sconv": _rows([11, 12, 13], 10.0)})
    assert rep.culprit is not None and rep.culprit.key == "layers.0.mlp_sconv"
