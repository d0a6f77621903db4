"""The aliases announced for one release are gone in 0.2.0 (CHANGELOG.md): each old module, name
and option fails with one line naming its new home (inkling_probe/removed.py), and the new homes
import without a warning."""
import importlib
import warnings

import pytest
from click.testing import CliRunner

from inkling_probe.removed import RELEASE, Removed

MODULES = [("inkling_probe.namemap", "inkling_probe.store.namemap"),
           ("inkling_probe.views.dump_html", "inkling_probe.store.dump_html"),
           ("inkling_probe.bisect.procs", "inkling_probe.procs"),
           ("inkling_model.plugins.faults", "inkling_model.switches.faults"),
           ("inkling_model.plugins.precision", "inkling_model.switches.precision"),
           ("inkling_model.plugins.forced_routing", "inkling_model.switches.forced_routing"),
           ("inkling_model.weights", "inkling_model.checkpoint.weights")]
NAMES = [("inkling_probe.store.reader", name, f"inkling_probe.store.dump.{name}")
         for name in ("Dump", "Segment", "MAX_OPEN_FILES", "PACK_CACHE_BYTES")] + [
         ("inkling_probe.compare.parallel", name, f"inkling_probe.compare.readahead.{name}")
         for name in ("lookup", "key_of")] + [
         ("inkling_model.layers.context", "ForwardContext", "inkling_model.layers.context.StepContext")]


def _one_line(e: BaseException, old: str, new: str) -> None:
    assert str(e) == f"{old} was removed in {RELEASE}: use {new}", str(e)


@pytest.mark.parametrize("old, new", MODULES)
def test_a_removed_module_names_its_new_home(old, new):
    with pytest.raises(ImportError) as e:
        importlib.import_module(old)
    _one_line(e.value, old, new)
    importlib.import_module(new)  # and the new home is there


@pytest.mark.parametrize("module, name, new", NAMES)
def test_a_removed_name_names_its_new_home(module, name, new):
    mod = importlib.import_module(module)
    with pytest.raises(Removed) as e:
        exec(f"from {module} import {name}", {})  # the statement users wrote
    _one_line(e.value, f"{module}.{name}", new)
    new_mod, new_name = new.rsplit(".", 1)
    assert getattr(importlib.import_module(new_mod), new_name) is not None
    with pytest.raises(AttributeError):
        mod.no_such_name


def test_compare_threads_names_jobs(tmp_path):
    from inkling_probe.compare import compare

    with pytest.raises(TypeError) as e:
        compare(tmp_path / "a", tmp_path / "b", threads=4)
    _one_line(e.value, "compare(threads=...)", "compare(jobs=N)")


def _cli(*args):
    from inkling_probe.cli import group

    return CliRunner().invoke(group, list(args))


def test_compare_diverged_only_names_the_default(tmp_path):
    r = _cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--diverged-only")
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"Error: --diverged-only was removed in {RELEASE}: use the default table (diverged keys and culprits; "
        "--all for every key)"], r.output
    assert "--diverged-only" not in _cli("compare", "--help").output


@pytest.mark.parametrize("search", ["flags", "precision"])
def test_bisect_control_names_control_dump(search, tmp_path):
    extra = ["--layers", "3"] if search == "precision" else []
    r = _cli("bisect", search, "--cmd", "true", *extra, "--control", str(tmp_path), "-w", str(tmp_path / "w"))
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"Error: --control was removed in {RELEASE}: use --control-dump DUMP in bisect flags|precision"], r.output
    assert not (tmp_path / "w").exists()


def test_the_new_homes_import_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from inkling_probe.compare import parallel, readahead  # noqa: F401
        from inkling_probe.store.dump import Dump  # noqa: F401
        from inkling_probe.store.reader import as_dump, open_dump  # noqa: F401


def test_calling_the_compare_package_is_deprecated_and_compare_dumps_is_the_same(tmp_path):
    """inkling_probe.compare(...) warns for one release (0.2.0) and gives what compare_dumps gives."""
    import warnings

    import torch

    import inkling_probe
    from dumps import write

    a = write(tmp_path / "a", [[("x", torch.ones(4, 16))]])
    b = write(tmp_path / "b", [[("x", torch.ones(4, 16) * 1.5)]])
    new = inkling_probe.compare_dumps(a, b, explain=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = inkling_probe.compare(a, b, explain=False)
    assert any(issubclass(w.category, DeprecationWarning) and "compare_dumps" in str(w.message) for w in caught)
    assert old.to_dict() == new.to_dict() and new.diverged
