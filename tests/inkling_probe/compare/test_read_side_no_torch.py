"""The read side runs on numpy and h5py: comparing two dumps never imports torch (issue 8 item 6)."""
import subprocess
import sys

import torch

from dumps import write

PROGRAM = """
import sys
from inkling_probe.compare import compare
rep = compare(sys.argv[1], sys.argv[2], control=sys.argv[3])
assert rep.culprit is not None and rep.culprit.key == "b", rep.culprit
assert rep.findings("b"), "explained"
print("torch" in sys.modules)
"""


def test_compare_with_control_and_explain_imports_no_torch(tmp_path):
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    ref = write(tmp_path / "r", [[("a", x), ("b", x * 2), ("c", x * 3)]])
    ctl = write(tmp_path / "k", [[("a", x), ("b", x * 2), ("c", x * 3)]])
    cand = write(tmp_path / "c", [[("a", x), ("b", x * 2 * 448), ("c", x * 3)]])
    out = subprocess.run([sys.executable, "-c", PROGRAM, ref, cand, ctl], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
