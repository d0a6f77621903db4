"""A batch of tensors laid end to end: split back in order, and its buffer freed exactly once."""
import numpy as np
import pytest

from inkling_probe.store.batch import Countdown, add_each, split


def _batch():
    flat = np.arange(20, dtype=np.float32)
    spans = [(0, 6, (2, 3)), (6, 4, (4,)), (10, 10, (5, 2))]
    sums = np.array([[15.0, 55.0, 5.0, 0, 0], [30.0, 230.0, 9.0, 0, 0], [145.0, 2185.0, 19.0, 0, 0]])
    rows = [{"key": k} for k in "abc"]
    return rows, flat, spans, sums


def test_split_gives_each_tensor_its_view_and_statistics_in_order():
    rows, flat, spans, sums = _batch()
    out = list(split(rows, flat, spans, sums, stats=True))
    assert [r["key"] for r, _, _ in out] == ["a", "b", "c"]
    assert out[0][1].shape == (2, 3) and np.array_equal(out[2][1], flat[10:].reshape(5, 2))
    assert out[1][2]["mean"] == pytest.approx(7.5) and out[1][2]["absmax"] == 9.0
    assert np.shares_memory(out[1][1], flat)  # views, not copies
    assert [s for _, _, s in split(rows, flat, spans, None, stats=False)] == [False] * 3


def test_a_tensor_whose_sums_are_nan_gets_its_statistics_from_the_writer():
    """A NaN sum marks a tensor holding a NaN or an infinity (sums_from_rows): the writer
    computes its statistics (counts, finite values' sums) from the values."""
    rows, flat, spans, sums = _batch()
    sums[1, 0] = np.nan
    given = [s for _, _, s in split(rows, flat, spans, sums, stats=True)]
    assert isinstance(given[0], dict) and given[1] is True and isinstance(given[2], dict)


def test_the_buffer_is_freed_once_the_last_tensor_is_stored():
    rows, flat, spans, sums = _batch()
    callbacks, freed = [], []
    add_each(lambda row, a, stats, store, on_stored: callbacks.append(on_stored),
             rows, flat, spans, sums, True, True, lambda: freed.append(1))
    callbacks[2]()
    callbacks[0]()
    assert freed == []
    callbacks[1]()
    callbacks[1]()  # a second call of one tensor's callback counts once
    assert freed == [1]


def test_a_failing_add_frees_the_buffer_after_the_tensors_already_handed_over():
    rows, flat, spans, sums = _batch()
    callbacks, freed = [], []

    def add(row, a, stats, store, on_stored):
        if row["key"] == "b":
            on_stored()  # it may or may not have called it before failing
            raise OSError(28, "No space left on device")
        callbacks.append(on_stored)
    with pytest.raises(OSError):
        add_each(add, rows, flat, spans, sums, True, True, lambda: freed.append(1))
    assert freed == [] and len(callbacks) == 1  # "a" is still being written
    callbacks[0]()
    assert freed == [1]


def test_an_empty_countdown_runs_at_once():
    ran = []
    Countdown(0, lambda: ran.append(1))
    assert ran == [1]
