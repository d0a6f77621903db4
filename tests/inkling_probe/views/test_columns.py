"""The terminal output fits ``COLUMNS``: the table, the verdict and the explain lines (issue 22: the
explain lines ignored it, wrapping at 160 in a pipe), without cutting the status or a number."""
import pytest
import torch
from click.testing import CliRunner

from inkling_probe.cli import group

from dumps import write

KEY = "layers.0.mlp.experts.a_long_probe_point_name"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root, x = tmp_path_factory.mktemp("cols"), torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    return (write(root / "ref", [[(KEY, x), ("layers.0.out", 2 * x)]]),
            write(root / "cand", [[(KEY, 2688 * x), ("layers.0.out", 2 * 2688 * x)]]))


@pytest.mark.parametrize("columns", [72, 100, 140])
def test_every_line_fits_columns(pair, columns):
    r = CliRunner().invoke(group, ["compare", *pair], env={"COLUMNS": str(columns)})
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= columns, r.output
    assert any("CULPRIT,FIRST" in line for line in lines) and "2.69e+03" in r.output
    assert "candidate = 2688 x reference (2688 = 6*448)" in " ".join(r.output.split())
    assert any(line.lstrip().startswith("explain") for line in lines)
