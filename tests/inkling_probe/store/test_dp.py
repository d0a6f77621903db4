"""Attention-DP dumps read in the DP=1 layout (store/dp.py): rows put back per request, padding dropped,
what can't be put back named when read."""

import numpy as np
import pytest
import torch

from dumps import write_tp
from inkling_probe.errors import DumpError
from inkling_probe.store.dump import Dump

ROWS = {0: torch.arange(0, 12.0).reshape(6, 2), 1: torch.arange(100, 112.0).reshape(6, 2),
        2: torch.arange(200, 206.0).reshape(3, 2)}  # request id -> its token rows [n, 2]


def _layout(dp_rank, requests, **extra):
    return {"dp_rank": dp_rank, "dp_size": 2, "requests": requests, **extra}


def _dp_dump(path, tp=1, pad=False, **kw):
    """DP 2 x TP tp: group 0 serves requests 0 and 2, group 1 request 1 (and a padding row with pad)."""
    per_rank = []
    for rank in range(2 * tp):
        g, a = divmod(rank, tp)
        ids = [0, 2] if g == 0 else [1]
        x = torch.cat([ROWS[i] for i in ids])
        reqs = [[i, ROWS[i].shape[0]] for i in ids]
        if pad and g == 1:
            x, reqs = torch.cat([x, torch.full((1, 2), -7.0)]), reqs + [[-1, 1]]
        shard = x[:, a:a + 2 // tp] if tp > 1 else x
        lay = _layout(g, reqs, **kw)
        per_rank.append([[("h", x, lay), ("q", shard, {"shard": "concat", "dim": 1, **lay}),
                          ("p", x / tp, {"shard": "partial", **lay}), ("scale", torch.tensor([2.0]), {"token_dim": None, **lay})]])
    return Dump(write_tp(path, per_rank))


@pytest.mark.parametrize("tp", [1, 2])
def test_requests_back_in_id_order(tmp_path, tp):
    d = _dp_dump(tmp_path / "d", tp=tp, pad=True)
    want = torch.cat([ROWS[0], ROWS[1], ROWS[2]]).numpy()
    assert (d.dp_size, d.world_size) == (2, tp)
    for key in ("h", "q", "p"):
        assert np.array_equal(d.array(key), want), key
    assert np.array_equal(d.array("scale"), [2.0])
    assert d.rows("h")[0]["shape"] == (15, 2) and d.rows("h")[0]["meta"]["requests"] == [[0, 6], [1, 6], [2, 3]]
    assert torch.equal(d.tensor("q"), torch.from_numpy(want))


def test_stats_and_hash_of_merged_rows(tmp_path):
    d = _dp_dump(tmp_path / "d")
    row = d.rows("h")[0]
    assert row["absmax"] == 205.0 and row["nan"] == 0 and len(row["hash"]) == 16
    assert row["rms"] == pytest.approx(float(np.sqrt((d.array("h") ** 2).mean())))


def test_raw_ranks_still_readable(tmp_path):
    _dp_dump(tmp_path / "d")
    raw = Dump(str(tmp_path / "d"), dp_raw=True)
    assert raw.world_size == 2 and np.array_equal(raw.array("h", rank=1), ROWS[1].numpy())


def test_what_cannot_be_put_back_is_named(tmp_path):
    # a token slice (recorded rows fewer than the requests declare)
    per_rank = [[[("h", ROWS[0][:2], _layout(g, [[g, 6]]))]] for g in range(2)]
    d = Dump(write_tp(tmp_path / "sliced", per_rank))
    with pytest.raises(DumpError, match="holds 2 token rows from 0 but its requests hold 6"):
        d.array("h")
    # one request served by both groups
    per_rank = [[[("h", ROWS[0], _layout(g, [[0, 6]]))]] for g in range(2)]
    with pytest.raises(DumpError, match="served by two DP groups"):
        Dump(write_tp(tmp_path / "twice", per_rank)).array("h")
    # no request ids declared
    per_rank = [[[("h", ROWS[0], _layout(g, None))]] for g in range(2)]
    with pytest.raises(DumpError, match="declares no requests"):
        Dump(write_tp(tmp_path / "noids", per_rank)).array("h")
