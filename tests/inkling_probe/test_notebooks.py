"""notebooks/ run green: each is executed with nbclient on the `tiny` preset (its own asserts check
the culprit it hunts) and is committed without outputs."""
import os
import pathlib
import time

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def test_the_walkthroughs_exist():
    assert [p.stem for p in NOTEBOOKS] == ["01_quickstart", "02_nvfp4_input_scale", "03_cuda_graph", "04_bisect",
                                           "05_multimodal", "06_compiled"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


def _source(stem: str, kind: str) -> str:
    import nbformat

    nb = nbformat.read(next(p for p in NOTEBOOKS if p.stem == stem), as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == kind)


def test_culprit_is_where_error_is_born_not_the_largest_jump():
    """Issue 22: notebook 01 said the culprit is "the key with the largest jump" (compare's rule is
    where error is born: clean inputs, or far beyond what they carry)."""
    for path in NOTEBOOKS:
        text = _source(path.stem, "markdown")
        assert "largest *jump*" not in text and "the key with the largest" not in text, path.name
    assert "error is **born**" in _source("01_quickstart", "markdown")


def test_notebook_03_drives_the_real_runtime():
    """Issue 22: notebook 03 was a toy decode step; it now runs inkling_model's decode runtime (the
    static path eagerly on the CPU, captured graphs on a GPU) and graphdiff's check of what ran."""
    code = _source("03_cuda_graph", "code")
    assert "from inkling_model.runtime.runtime import Runtime" in code and "enforce_eager=True" in code
    assert "cuda_graph=True" in code and "graph_vs_eager" in code and "class DecodeStep" not in code


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
