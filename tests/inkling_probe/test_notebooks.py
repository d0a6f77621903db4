"""notebooks/ run green: each is executed with nbclient on the `tiny` preset (its own asserts check
the culprit it hunts) and is committed without outputs."""
import os
import pathlib
import time

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def test_the_four_walkthroughs_exist():
    assert [p.stem for p in NOTEBOOKS] == ["01_quickstart", "02_nvfp4_input_scale", "03_cuda_graph", "04_bisect"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for var in [v for v in os.environ if v.startswith(("INKLING_PROBE", "INKLING_FAULT"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' work folders land here
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    seconds = time.perf_counter() - start
    print(f"{path.name}: {seconds:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert seconds < 60 * 2  # the issue asks for under a minute on 2 quiet cores; margin for a loaded machine
