"""A folder written by SGLang's own dumper code reads as a dump. Runs where SGLang's ``dumper.py`` can be
found: ``SGLANG_DUMPER_PY=/path/to/sglang/srt/debug_utils/dumper.py`` (e.g. from an unpacked sglang
wheel: ``pip download sglang --no-deps``), or an installed sglang; skipped elsewhere."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import inkling_probe


def _dumper_py():
    path = os.environ.get("SGLANG_DUMPER_PY")
    if path:
        return path
    spec = importlib.util.find_spec("sglang")
    if spec and spec.submodule_search_locations:
        candidate = os.path.join(list(spec.submodule_search_locations)[0], "srt", "debug_utils", "dumper.py")
        return candidate if os.path.isfile(candidate) else None
    return None


DUMPER = _dumper_py()
pytestmark = pytest.mark.skipif(DUMPER is None, reason="SGLang's dumper.py not found (set SGLANG_DUMPER_PY)")

SCRIPT = r"""
import json, sys, torch
from inkling_probe.store.foreign.sglang_format import load_sglang_dumper
real = load_sglang_dumper(sys.argv[1])
d = real.dumper
d.configure(enable=True, dir=sys.argv[2], exp_name="dump_test", enable_output_console=False, non_intrusive_mode="all")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)).to(torch.bfloat16)
d.register_non_intrusive_dumper(model)
x = torch.randn(5, 4).to(torch.bfloat16)
for step in range(2):
    with torch.no_grad():
        y = model(x + step)
    d.dump("by_hand", y * 2, layer_id=7)
    d.step()
print(json.dumps({"y1": y.float().tolist()}))
"""


def test_a_folder_written_by_sglangs_dumper(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, DUMPER, str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    y1 = np.array(json.loads(out.stdout.strip().splitlines()[-1])["y1"], np.float32)
    with inkling_probe.open(tmp_path / "dump_test") as d:
        keys = d.keys()
        # the non-intrusive hooks' names read as our hooks name module paths
        assert {"0", "1", "2", "0.in.0", "by_hand.layer_id=7"} <= set(keys), keys
        assert d.steps("2") == [0, 1]
        np.testing.assert_array_equal(d.array("2", step=1), y1)
        np.testing.assert_array_equal(d.array("by_hand.layer_id=7", step=1), y1 * 2)
        assert d.rows("2", 1)[0]["dtype"] == "bfloat16"
        assert d.rows("2", 1)[0]["meta"]["dumper"]["world_size"] == 1
        # execution order from the dump index: the first Linear before the last
        assert keys.index("0") < keys.index("2") < keys.index("by_hand.layer_id=7")
