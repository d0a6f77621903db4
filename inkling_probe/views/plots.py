"""The two plots of a report: error per probe point in execution order, and token x layer error.

matplotlib is imported inside each function (the read side starts without it). With ``ax=None``
a new figure is made: through pyplot in a notebook (``interactive=True``), else a bare Agg
``Figure`` that :func:`png` turns into bytes without touching any display.
"""
from __future__ import annotations

import io
import math

import numpy as np

from inkling_probe.views.doc import as_doc, culprits, rows

_FLOOR_EPS = 1e-12  # errors of exactly 0 are drawn at the bottom of the log axis


def new_axes(size=(11, 4.2), interactive: bool = False):
    if interactive:
        import matplotlib.pyplot as plt

        return plt.subplots(figsize=size, layout="constrained")[1]
    from matplotlib.figure import Figure

    return Figure(figsize=size, layout="constrained").add_subplot()


def png(ax_or_fig, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (Agg, no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = getattr(ax_or_fig, "figure", ax_or_fig)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def divergence_by_layer(report, ax=None, step: int | None = None, interactive: bool = False):
    """Error of every compared key in execution order (log scale), its threshold and noise floor
    as lines, diverged keys in red, culprits starred and named, layer boundaries as ticks."""
    doc = as_doc(report)
    ax = ax if ax is not None else new_axes(interactive=interactive)
    drawn = [r for r in rows(doc, step) if r.get("error") is not None and r.get("against", "reference") == "reference"]
    x = np.arange(len(drawn))
    err = np.array([float(r["error"]) for r in drawn], dtype=float)
    values = np.concatenate([err, [r.get("threshold") or 0.0 for r in drawn]])
    bottom = float(values[values > 0].min()) / 10 if (values > 0).any() else 1e-8
    exact = err <= 0
    err = np.where(exact, bottom, err)  # exact agreement sits on the bottom of the log axis
    ax.step(x, [_positive(r.get("threshold")) for r in drawn], where="mid", color="tab:orange", lw=1.2,
            label="threshold")
    if any(r.get("floor") is not None for r in drawn):
        ax.step(x, [_positive(r.get("floor")) if r.get("floor") is not None else np.nan for r in drawn],
                where="mid", color="tab:gray", lw=1, ls="--", label="noise floor (control)")
    bad = np.array([bool(r.get("diverged")) for r in drawn], dtype=bool)
    ax.plot(x, err, color="tab:blue", lw=0.8, alpha=0.6)
    ok = ~bad & ~exact
    ax.scatter(x[ok], err[ok], s=9, color="tab:blue", label=f"{doc.get('metric', 'rel_rms')} within tolerance")
    ax.scatter(x[exact], err[exact], s=9, marker="_", color="tab:green", label="exact (0)")
    ax.scatter(x[bad], err[bad], s=12, color="tab:red", label="diverged")
    _mark_culprits(ax, doc, drawn, err)
    _layer_ticks(ax, drawn)
    ax.set_yscale("log")
    ax.set_ylim(bottom / 2, None)
    ax.set_ylabel(doc.get("metric", "rel_rms"))
    ax.set_xlabel("probe point, in execution order")
    ax.set_title("error per probe point")
    ax.legend(loc="upper left", fontsize=8)
    return ax


def _positive(v) -> float:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return np.nan
    return max(float(v), _FLOOR_EPS)  # a zero threshold or floor stays on the log axis


def _mark_culprits(ax, doc, drawn, err) -> None:
    where = {(r["key"], r.get("step", 0), r.get("call", 0)): i for i, r in enumerate(drawn)}
    for rank, c in enumerate(culprits(doc), 1):
        i = where.get((c["key"], c.get("step", 0), c.get("call", 0)))
        if i is None:
            continue
        ax.scatter([i], [err[i]], marker="*", s=260, color="crimson", edgecolor="black", zorder=5,
                   label="culprit" if rank == 1 else None)
        ax.annotate(f"culprit {rank}: {c['key']}", (i, err[i]), xytext=(8, 10 + 12 * (rank - 1)),
                    textcoords="offset points", fontsize=9, color="crimson")


def _layer_ticks(ax, drawn) -> None:
    ticks, labels, seen = [], [], set()
    for i, r in enumerate(drawn):
        tag = (r.get("step", 0), r.get("layer"))
        if r.get("layer") is not None and tag not in seen:
            seen.add(tag)
            ticks.append(i)
            labels.append(f"L{r['layer']}")
    if len(ticks) > 40:  # long models: every n-th layer
        every = math.ceil(len(ticks) / 40)
        ticks, labels = ticks[::every], labels[::every]
    ax.set_xticks(ticks, labels, fontsize=8)
    for t in ticks:
        ax.axvline(t - 0.5, color="black", lw=0.3, alpha=0.3)


def heatmap(token_errors, report=None, ax=None, interactive: bool = False):
    """Per-token error (rows: layers in execution order, columns: tokens), log colour scale; the
    layers holding a culprit of ``report`` are named in red."""
    from matplotlib.colors import LogNorm

    te = token_errors
    ax = ax if ax is not None else new_axes((11, 0.35 * max(len(te.labels), 4) + 1.6), interactive)
    data = np.where(np.isfinite(te.errors), te.errors, np.nan)
    positive = data[data > 0]
    lo = max(float(positive.min()) / 10, 1e-8) if positive.size else 1e-8  # exact (0) = darkest
    hi = max(float(positive.max()), lo * 10) if positive.size else 1.0
    image = ax.imshow(np.clip(np.nan_to_num(data, nan=lo), lo, None), aspect="auto", cmap="magma",
                      norm=LogNorm(lo, hi), interpolation="nearest")
    ax.set_yticks(range(len(te.labels)), te.labels, fontsize=8)
    marked = _culprit_layers(as_doc(report)) if report is not None else {}
    for i, (key, layer) in enumerate(zip(te.keys, te.layers)):
        if key in marked or (layer is not None and layer in marked):
            ax.get_yticklabels()[i].set_color("crimson")
            ax.annotate(f"< culprit {marked.get(key, marked.get(layer))}", (1.0, i), xycoords=("axes fraction", "data"),
                        xytext=(4, 0), textcoords="offset points", va="center", fontsize=8, color="crimson")
    ax.set_xlabel("token")
    ax.set_title(f"per-token rel_rms of each layer's output, step {te.step} (exact = darkest)")
    ax.figure.colorbar(image, ax=ax, label="rel_rms")
    return ax


def _culprit_layers(doc: dict) -> dict:
    """{layer or key: culprit key} for each culprit (its layer from the compare rows)."""
    layer_of = {(r["key"], r.get("step", 0)): r.get("layer") for r in rows(doc)}
    out = {}
    for c in culprits(doc):
        layer = layer_of.get((c["key"], c.get("step", 0)))
        out.setdefault(layer if layer is not None else c["key"], c["key"])
    return out
