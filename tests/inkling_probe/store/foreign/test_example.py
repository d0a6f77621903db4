"""The worked example of docs/INTEROP.md runs and names the planted culprit (with SGLang's own dumper code
where SGLANG_DUMPER_PY points at it, else with the format writer)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "interop_example.py"
DUMPERS = [None] + ([os.environ["SGLANG_DUMPER_PY"]] if os.environ.get("SGLANG_DUMPER_PY") else [])


@pytest.mark.parametrize("dumper", DUMPERS, ids=lambda d: "sglang-dumper" if d else "format-writer")
def test_worked_example(tmp_path, dumper):
    args = [sys.executable, str(SCRIPT), str(tmp_path)] + (["--sglang-dumper", dumper] if dumper else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "culprit: layers.3.mlp.experts step 0: error born here" in out.stdout
    assert "explain layers.3.mlp.experts: candidate = 8 x reference (2**3)" in out.stdout
    assert "the folder and the imported store give the same verdict: True" in out.stdout
