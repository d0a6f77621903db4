"""The extracted pytest reproduces a planted bug alone: for raw_input_amax (NVFP4 experts of layer 3)
and gate_up_layout (experts of layer 2) it fails with the candidate's recorded settings (the fault
on) and passes without the fault, whatever this shell sets, with no model run and no checkpoint (the
tensors and values beside it); other keys get the tensor check, whose text says what it checks."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from inkling_probe.bundle import write_report
from inkling_probe.bundle import extract as extract_module
from inkling_probe.bundle.extract import extract
from inkling_probe.cli import group

TEMPLATE = Path(extract_module.__file__).with_name("repro_template.py.txt")


def _load(path):
    spec = importlib.util.spec_from_file_location(f"repro_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gate_up_report(hunt, tmp_path_factory):
    from inkling_probe.compare import compare

    out = tmp_path_factory.mktemp("gate-up") / "rep"
    write_report(compare(hunt["ref_fp32"], hunt["gate_up"]), out)
    return out


def _set_fault(path, value):
    """Edit the repro's recorded INKLING_FAULT (its JSON beside it): the planted fault is the bug's code,
    so the value recorded as None stands for the engine with the bug fixed."""
    spec_path = path.with_suffix(".json")
    spec = json.loads(spec_path.read_text())
    spec["settings"]["INKLING_FAULT"] = value
    spec_path.write_text(json.dumps(spec))


def _check_module_repro(path, fault, monkeypatch):
    test = next(getattr(m, n) for m in [_load(path)] for n in dir(m) if n.startswith("test_"))
    monkeypatch.delenv("INKLING_FAULT", raising=False)  # this shell's setting does not count:
    with pytest.raises(AssertionError, match="rel_rms .* > tolerance"):
        test()  # the candidate's recorded setting is applied
    _set_fault(path, None)
    monkeypatch.setenv("INKLING_FAULT", fault)  # nor here
    test()  # the bug's code path switched off in the recorded settings: passes
    _set_fault(path, fault)


def test_raw_input_amax_repro_fails_with_the_fault_and_passes_without(hunt, amax_report, tmp_path, monkeypatch):
    monkeypatch.delenv("INKLING_FAULT", raising=False)  # the candidate's recorded settings are applied
    done = extract(str(amax_report[0]), str(tmp_path / "test_amax.py"), ckpt=hunt["ckq"])
    assert (done.key, done.kind) == ("layers.3.mlp.experts", "module") and done.fails_now
    assert done.error > 0.6 and done.tolerance < 0.6  # 0.74 with the raw amax, 0.25 for NVFP4 itself
    assert "INKLING_FAULT" not in os.environ  # applied to the check only
    text = (tmp_path / "test_amax.py").read_text()
    assert text == TEMPLATE.read_text()  # the same code for every repro: nothing pasted into it
    spec = (tmp_path / "test_amax.json").read_text()
    assert hunt["ckq"] not in spec and str(hunt["root"]) not in spec and "2688 = 6*448" in spec
    assert json.loads(spec)["settings"]["INKLING_FAULT"] == "raw_input_amax"
    _check_module_repro(tmp_path / "test_amax.py", "raw_input_amax", monkeypatch)


def test_gate_up_repro_runs_alone_under_pytest(hunt, gate_up_report, tmp_path, monkeypatch):
    done = extract(str(gate_up_report), str(tmp_path / "made.py"), ckpt=hunt["ck"])
    assert (done.key, done.kind) == ("layers.2.mlp.experts", "module") and done.fails_now
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    for ext in (".py", ".json", ".safetensors"):  # the test and its data, nothing else beside them
        shutil.copy(tmp_path / f"made{ext}", alone / f"test_gate_up{ext}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INKLING_")}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_gate_up.py"],
                         cwd=alone, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 1 and "layers.2.mlp.experts step 0 (module check): rel_rms" in res.stdout, res.stdout[-600:]
    _check_module_repro(alone / "test_gate_up.py", "gate_up_layout", monkeypatch)  # and passes without it


def no_module(ckpt, key):
    """An extract factory that rebuilds nothing."""
    return None


def test_unbuildable_key_or_no_checkpoint_gives_the_tensor_check(hunt, amax_report, tmp_path):
    done = extract(str(amax_report[0]), str(tmp_path / "t1.py"), ckpt=hunt["ckq"], factory="test_extract:no_module")
    assert done.kind == "tensor" and "cannot be rebuilt standalone" in done.why
    done = extract(str(amax_report[0]), str(tmp_path / "t3.py"), key="layers.3.mlp.shared", ckpt=hunt["ckq"])
    assert done.kind == "tensor" and "no recorded inputs" in done.why and not done.fails_now  # shared is fine
    done = extract(str(amax_report[0]), str(tmp_path / "t2.py"))
    assert done.kind == "tensor" and "no --ckpt" in done.why and done.fails_now  # recorded 0.74 > 0.49
    spec = json.loads((tmp_path / "t2.json").read_text())
    assert "cannot pass after a fix" in spec["checks"] and spec["expect"].startswith("fails as long as")
    with pytest.raises(AssertionError):
        next(getattr(m, n) for m in [_load(tmp_path / "t2.py")] for n in dir(m) if n.startswith("test_"))()


def test_extract_cli_bad_input_exit_2(hunt, amax_report, tmp_path):
    runner = CliRunner()
    for args in ([str(tmp_path)], [str(amax_report[0]), "--key", "nope"],
                 [str(amax_report[0]), "--ckpt", str(tmp_path / "missing")]):
        res = runner.invoke(group, ["extract", *args, "-o", str(tmp_path / "x.py")])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, (args, res.output)
