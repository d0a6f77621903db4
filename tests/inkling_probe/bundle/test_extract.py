"""The extracted pytest reproduces a planted bug alone: for raw_input_amax (NVFP4 experts of layer 3)
and gate_up_layout (experts of layer 2) it fails with the fault switched on and passes without it,
with no model run and no checkpoint (the file holds the tensors); other keys get the tensor check."""
import importlib.util
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from inkling_probe.bundle import write_report
from inkling_probe.bundle.extract import extract
from inkling_probe.cli import group


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


def _check_module_repro(path, fault, monkeypatch):
    test = next(getattr(m, n) for m in [_load(path)] for n in dir(m) if n.startswith("test_"))
    monkeypatch.delenv("INKLING_FAULT", raising=False)
    test()  # the bug's code path switched off: passes
    monkeypatch.setenv("INKLING_FAULT", fault)
    with pytest.raises(AssertionError, match="rel_rms .* > tolerance"):
        test()


def test_raw_input_amax_repro_fails_with_the_fault_and_passes_without(hunt, amax_report, tmp_path, monkeypatch):
    monkeypatch.setenv("INKLING_FAULT", "raw_input_amax")
    done = extract(str(amax_report[0]), str(tmp_path / "test_amax.py"), ckpt=hunt["ckq"])
    assert (done.key, done.kind) == ("layers.3.mlp.experts", "module") and done.fails_now
    assert done.error > 0.6 and done.tolerance < 0.6  # 0.74 with the raw amax, 0.25 for NVFP4 itself
    text = (tmp_path / "test_amax.py").read_text()
    assert hunt["ckq"] not in text and str(hunt["root"]) not in text and "2688 = 6*448" in text
    _check_module_repro(tmp_path / "test_amax.py", "raw_input_amax", monkeypatch)


def test_gate_up_repro_runs_alone_under_pytest(hunt, gate_up_report, tmp_path, monkeypatch):
    monkeypatch.setenv("INKLING_FAULT", "gate_up_layout")
    done = extract(str(gate_up_report), str(tmp_path / "made.py"), ckpt=hunt["ck"])
    assert (done.key, done.kind) == ("layers.2.mlp.experts", "module") and done.fails_now
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    shutil.copy(tmp_path / "made.py", alone / "test_gate_up.py")  # the one file, nothing beside it
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_gate_up.py"],
                         cwd=alone, capture_output=True, text=True, timeout=120)  # INKLING_FAULT=gate_up_layout
    assert res.returncode == 1 and "layers.2.mlp.experts: rel_rms" in res.stdout, res.stdout[-600:]
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
    with pytest.raises(AssertionError):
        next(getattr(m, n) for m in [_load(tmp_path / "t2.py")] for n in dir(m) if n.startswith("test_"))()


def test_extract_cli_bad_input_exit_2(hunt, amax_report, tmp_path):
    runner = CliRunner()
    for args in ([str(tmp_path)], [str(amax_report[0]), "--key", "nope"],
                 [str(amax_report[0]), "--ckpt", str(tmp_path / "missing")]):
        res = runner.invoke(group, ["extract", *args, "-o", str(tmp_path / "x.py")])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, (args, res.output)
