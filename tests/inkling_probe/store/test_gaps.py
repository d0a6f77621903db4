"""store/gaps.py: missing numbers as ranges, found between the numbers present."""
import tracemalloc

from inkling_probe.store import gaps


def test_ranges():
    assert gaps.missing([0, 3, 7], 10) == [(1, 2), (4, 6), (8, 9)]
    assert gaps.missing([2, 0, 1], 3) == []
    assert gaps.missing([], 2) == [(0, 1)]
    assert gaps.missing([5, -1], 3) == [(0, 2)]  # outside the span: the caller's to refuse
    assert gaps.count([(1, 2), (4, 6)]) == 5
    assert gaps.text([(1, 2), (4, 4), (6, 9), (11, 12)]) == "1..2, 4, 6..9, ..."


def test_a_world_of_10_to_the_12_costs_nothing():
    tracemalloc.start()
    holes = gaps.missing([0, 99999999999], 10**12)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert holes == [(1, 99999999998), (100000000000, 10**12 - 1)]
    assert peak < 100_000
