"""Delta debugging (Zeller's ddmin): a 1-minimal subset of items for which ``test`` holds.

``test(subset)`` must hold for the whole list. The result holds ``test`` and no single item can be
removed from it without losing that. The order of the tests is a function of the items and the
answers only, so a resumed bisect asks the same questions in the same order.
"""
from __future__ import annotations


def _chunks(items: list, n: int) -> list[list]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def ddmin(items: list, test) -> list:
    """The 1-minimal subset of ``items`` (order kept) that ``test`` holds for."""
    items, n = list(items), 2
    while len(items) >= 2:
        chunks = _chunks(items, n)
        found = next((c for c in chunks if test(c)), None)
        if found is not None:
            items, n = found, 2
            continue
        if n > 2:
            comps = ([x for x in items if x not in c] for c in chunks)
            found = next((c for c in comps if test(c)), None)
            if found is not None:
                items, n = found, max(n - 1, 2)
                continue
        if n >= len(items):
            break
        n = min(2 * n, len(items))
    return items
