"""``inkling_probe.open(path)`` in a notebook shows a table, not one line: keys with their steps,
calls, ranks, dtypes, shapes and sizes (issue 22), from the index alone."""
import re

import torch

import inkling_probe
from inkling_probe.store.dump_html import dump_html

from dumps import write_tp


def test_dump_has_an_html_table(tmp_path):
    steps = lambda r: [[("embed", torch.ones(3, 4, dtype=torch.bfloat16) * (r + s), {"shard": "concat", "dim": 1}),
                        ("ids", torch.arange(3)), ("ids", torch.arange(3))] for s in range(2)]
    path = write_tp(tmp_path / "d", [steps(0), steps(1)])
    html = inkling_probe.open(path)._repr_html_()
    assert html.startswith("<div>") and "<table>" in html
    assert re.search(r"2 keys, 12 tensors, steps 0-1, ranks 0-1 of 2, ", html), html
    cells = lambda key: re.search(rf"<tr><td>{re.escape(key)}</td>(.*?)</tr>", html).group(1)
    assert cells("embed") == "<td>0-1</td><td>1</td><td>0-1</td><td>bfloat16</td><td>3x4</td><td>96 B</td>"
    assert cells("ids") == "<td>0-1</td><td>2</td><td>0-1</td><td>int64</td><td>3</td><td>192 B</td>"
    assert [m for m in re.findall(r"<th>(\w+)</th>", html)] == ["key", "steps", "calls", "ranks", "dtype", "shape",
                                                                "size"]


def test_long_dumps_are_cut_and_keys_escaped(tmp_path):
    from dumps import write

    path = write(tmp_path / "d", [[(f"k{i}", torch.zeros(2)) for i in range(5)]])
    html = dump_html(inkling_probe.open(path), limit=3)
    assert html.count("<tr><td>k") == 3 and "... 2 more keys" in html
