"""Views of a compare result: the rich terminal table (:mod:`.terminal`), and views built from the
JSON document (``Report.to_dict()``, the same as ``compare --json``): plain text (:mod:`.text`),
Markdown (:mod:`.markdown`), HTML (:mod:`.html`), plots (:mod:`.plots`, matplotlib imported on use)
and the token x layer errors the heatmap draws (:mod:`.tokens`, numpy only). :class:`ReportViews`
gives a report its notebook face. :mod:`.format` writes values out for every view, the bundle and
the CLI: ``fmt`` for people, JSON without NaN/Inf for machines.
"""
from inkling_probe.views.doc import as_doc, culprits
from inkling_probe.views.notebook import ReportViews, to_pandas

__all__ = ["as_doc", "culprits", "ReportViews", "to_pandas"]
