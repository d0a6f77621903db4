"""Recording inside CUDA graphs: static buffers planned at warm-up, copies captured into the graph,
an async drain after each replay, node counting, and graph-vs-eager comparison (docs/GRAPHS.md)."""
from inkling_probe.graphs.static import BUDGET_ENV, BudgetError, budget_bytes

__all__ = ["BUDGET_ENV", "BudgetError", "budget_bytes"]
