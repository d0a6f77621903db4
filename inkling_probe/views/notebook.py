"""What a compare report offers in Jupyter, as one mixin: a short ``repr``, an HTML table
(culprits first), ``.plot()``, ``.heatmap()`` and ``.to_pandas()``.

A class with ``to_dict()`` (the ``compare --json`` document) and, optionally, ``ref``/``cand``
dump paths inherits :class:`ReportViews`; the functions below also take the document itself.
"""
from __future__ import annotations

import types

from inkling_probe.views.doc import as_doc


def to_pandas(report):
    """One DataFrame row per compared key (metrics flattened into columns), execution order."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_pandas() needs pandas, which is not installed: pip install pandas "
                          "(the rows are also plain dicts: report.to_dict()['rows'])") from None
    flat = []
    for r in as_doc(report).get("rows") or []:
        row = {k: v for k, v in r.items() if k != "metrics"}
        row["shape"] = "x".join(map(str, r.get("shape") or []))
        row.update({f"m_{k}": v for k, v in (r.get("metrics") or {}).items() if not isinstance(v, (list, dict))})
        flat.append(row)
    return pd.DataFrame(flat)


def heatmap(report, ref=None, cand=None, step=None, ax=None):
    """Token x layer error read from the two dumps (default: the report's own ``ref``/``cand``)."""
    from inkling_probe.store.reader import as_dump
    from inkling_probe.views import plots
    from inkling_probe.views.tokens import token_errors

    doc = as_doc(report)
    ref, cand = as_dump(ref or doc["ref"]), as_dump(cand or doc["cand"])
    return plots.heatmap(token_errors(doc, ref, cand, step), doc, ax=ax, interactive=ax is None)


class ReportViews:
    """Mixin for the compare Report: needs only ``to_dict()``."""

    def __repr__(self) -> str:
        from inkling_probe.views.text import short_repr

        return short_repr(self)

    def _repr_html_(self) -> str:
        from inkling_probe.views.html import repr_html

        return repr_html(self)

    def summary(self) -> str:
        """The verdict, the first divergence and the culprits with their findings, as text."""
        from inkling_probe.views.text import summary_lines

        return "\n".join(summary_lines(self))

    def plot(self, ax=None, step=None):
        """Error per probe point in execution order, threshold and floor drawn, culprits starred."""
        from inkling_probe.views.plots import divergence_by_layer

        return divergence_by_layer(self, ax=ax, step=step, interactive=ax is None)

    def heatmap(self, step=None, ax=None):
        """Per-token error of each layer's output (reads the two dumps)."""
        return heatmap(self, step=step, ax=ax)

    def to_pandas(self):
        return to_pandas(self)


class _CallablePackage(types.ModuleType):
    """The ``inkling_probe.compare`` package, callable for one more release: ``inkling_probe.compare(ref,
    cand, ...)`` is deprecated since 0.2.0 (a package and a function do not share a name); it warns and
    calls :func:`inkling_probe.compare_dumps`, the same function. Removed in 0.3.0."""

    def __call__(self, *args, **kwargs):
        import warnings

        warnings.warn("inkling_probe.compare(...) is deprecated since 0.2.0 and goes in 0.3.0: use "
                      "inkling_probe.compare_dumps(...) (or inkling_probe.compare.compare(...))",
                      DeprecationWarning, stacklevel=2)
        return self.compare(*args, **kwargs)


def callable_compare(package):
    """The compare package made callable for the deprecated ``inkling_probe.compare(...)`` (0.2.0 only)."""
    if not callable(package):
        package.__class__ = _CallablePackage
    return package
