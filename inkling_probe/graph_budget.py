"""The static-buffer budget of in-graph recording (CUDA graphs: a runner's own captures, graphs/, and
torch.compile's, tracing/replays.py): ``INKLING_PROBE_GRAPH_MB`` and the slot alignment."""
from __future__ import annotations

import os

from inkling_probe.errors import ProbeError

BUDGET_ENV = "INKLING_PROBE_GRAPH_MB"
DEFAULT_BUDGET_MB = 256.0
ALIGN = 256


class BudgetError(ProbeError):
    """In-graph recording would need more static buffer memory than its budget."""


def budget_bytes(environ=None) -> int:
    """The in-graph buffer budget from ``INKLING_PROBE_GRAPH_MB`` (default 256 MiB)."""
    text = (environ if environ is not None else os.environ).get(BUDGET_ENV, "").strip()
    try:
        mb = float(text) if text else DEFAULT_BUDGET_MB
    except ValueError:
        raise BudgetError(f"{BUDGET_ENV}={text!r}: expected a size in MiB") from None
    if mb <= 0:
        raise BudgetError(f"{BUDGET_ENV}={text!r}: must be > 0")
    return int(mb * 2**20)
