"""explain/ imports numpy only: the read side of compare must not pay for torch."""
import subprocess
import sys
from pathlib import Path

import importlib

HERE = Path(importlib.import_module("inkling_probe.compare.explain.base").__file__).parent  # explain/
# compare/__init__.py (the engine) is not explain's: stand in an empty package for it, so that only
# explain/ and what it imports are loaded
PROBE = f"""
import sys, types
pkg = types.ModuleType("inkling_probe.compare")
pkg.__path__ = [{str(HERE.parent)!r}]
sys.modules["inkling_probe.compare"] = pkg
import numpy as np
from inkling_probe.compare.explain import explain
r = np.random.default_rng(0).standard_normal((16, 32))
assert explain(r, 2688 * r)[0].name == "constant_ratio"
print(sorted(m for m in sys.modules if m.split(".")[0] == "torch"))
"""


def test_explain_imports_no_torch():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_no_torch_import_in_the_sources():
    for f in HERE.glob("*.py"):
        text = f.read_text()
        assert "import torch" not in text and "from torch" not in text, f
