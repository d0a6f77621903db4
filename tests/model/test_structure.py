"""The rooms of both packages stand one above another (scripts/structure.py): in every folder of
``model/`` and ``inkling_probe/``, no loop between rooms (no upward import) and no circle of files; the switches the layers read are leaves. The script itself finds a planted loop and a planted circle."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _structure():
    spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_model_rooms_have_no_upward_import_and_no_circle():
    s = _structure()
    r = s.rooms_of("model", s.graph(ROOT))
    assert r["rooms"] >= 12 and r["arrows"] > 30  # the model was read, not an empty folder
    assert r["upward"] == [] and r["room_loops"] == [], r["upward"]
    assert r["file_circles"] == [], r["file_circles"]


def _package_folders(top: str) -> list[str]:
    return sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / top).rglob("__init__.py"))


@pytest.mark.parametrize("top", ["model", "inkling_probe"])
def test_every_folder_has_no_upward_import_and_no_circle(top):
    """Each package folder, sub-folders included (``inkling_probe/compare``, ``inkling_probe/store``...),
    is a house of its own: its rooms import downward only and no files import each other in a loop."""
    s = _structure()
    edges = s.graph(ROOT)
    folders = _package_folders(top)
    assert len(folders) >= 8, folders  # the sub-packages were found
    found = {}
    for folder in folders:
        r = s.rooms_of(folder, edges)
        if r["upward"] or r["file_circles"]:
            found[folder] = (r["upward"], r["file_circles"])
    assert found == {}, found


def test_the_toolkit_was_read():
    s = _structure()
    edges = s.graph(ROOT)
    r = s.rooms_of("inkling_probe", edges)
    assert r["rooms"] >= 19 and r["arrows"] > 40, r  # not an empty folder
    assert "inkling_probe/store/namemap.py" in edges["inkling_probe/store/foreign/layout.py"]  # a lazy import


def test_switches_are_leaves_of_the_model():
    edges = _structure().graph(ROOT)
    for f in ("model/switches/faults.py", "model/switches/precision.py", "model/switches/forced_routing.py"):
        assert edges[f] == set() or all(not t.startswith("model/") for t in edges[f]), (f, edges[f])
    assert "model/switches/faults.py" in edges["model/layers/attention.py"]  # read from below


def test_the_script_finds_a_planted_loop_and_circle(tmp_path):
    (tmp_path / "pyproject.toml").write_text('package-dir = { "pkg" = "src" }\n')
    files = {"src/__init__.py": "", "src/a/__init__.py": "", "src/a/x.py": "from pkg.b import y\n",
             "src/b/__init__.py": "", "src/b/y.py": "def f():\n    from pkg.a import x\n",
             "src/c.py": "from . import d\n", "src/d.py": "import pkg.c\n", "src/e.py": "import pkg.c\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    s = _structure()
    r = s.rooms_of("src", s.graph(tmp_path))
    assert r["rooms"] == 5 and r["upward"] == [("a", "b"), ("b", "a"), ("c.py", "d.py"), ("d.py", "c.py")]
    assert r["file_circles"] == [["src/a/x.py", "src/b/y.py"], ["src/c.py", "src/d.py"]]


def test_the_script_gives_no_all_clear_for_a_folder_that_is_not_there(capsys):
    s = _structure()
    assert s.main(["no_such_folder"]) == 2
    err = capsys.readouterr().err
    assert "no_such_folder: no such folder" in err and err.count("\n") == 1
    assert s.main(["--loops"]) == 2 and "unknown option '--loops'" in capsys.readouterr().err
    assert s.main(["--help"]) == 0 and "Options:" in capsys.readouterr().out
