"""The structure of a package folder, from its imports: rooms, arrows, loops between rooms, file circles.

    .venv/bin/python scripts/structure.py model inkling_probe

A room is one entry of the folder (a sub-folder or a .py file; ``__init__.py`` is the folder's own
face and no room); an arrow A -> B says some file of room A imports one of room B (top-level or
inside a function: a lazy import is a dependency too). An arrow that closes a loop between rooms
(B also reaches A) is an upward import: it has no place in a house where every room stands above
what it uses. A file circle is a set of files that import each other in a loop. Module names map to
folders through pyproject.toml's ``package-dir`` (``inkling_model`` is ``model/``). Tests are no rooms.
tests/model/test_structure.py holds every folder of both packages to zero loops and zero circles.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """``{import name: folder}`` from pyproject.toml's ``package-dir`` line."""
    text = (root / "pyproject.toml").read_text()
    line = re.search(r"^package-dir\s*=\s*\{(.*)\}", text, re.M).group(1)
    return dict(re.findall(r'"([\w.]+)"\s*=\s*"([\w./]+)"', line))


def _module_of(path: Path, root: Path, dirs: dict[str, str]) -> str | None:
    rel = path.relative_to(root).with_suffix("")
    for name, folder in dirs.items():
        try:
            parts = rel.relative_to(folder).parts
        except ValueError:
            continue
        parts = parts[:-1] if parts and parts[-1] == "__init__" else parts
        return ".".join((name, *parts))
    return None


def _imports(path: Path, module: str, known) -> set[str]:
    """Every module name ``path`` imports (relative ones resolved): ``from X import y`` is ``X.y``
    where that is a module of ours, else ``X``."""
    out = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
                base = ".".join(parent + ([base] if base else []))
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``{file: files it imports}`` over every package folder (paths relative to ``root``)."""
    dirs = package_dirs(root)
    files = {}
    for folder in dirs.values():
        for path in sorted((root / folder).rglob("*.py")):
            files[_module_of(path, root, dirs)] = path.relative_to(root).as_posix()
    edges = {}
    for module, rel in files.items():
        targets = {files[m] for m in _imports(root / rel, module, files) if m in files}
        edges[rel] = targets - {rel}
    return edges


def _sccs(nodes, edges) -> list[set]:
    """Strongly connected components of more than one node (Tarjan, iterative enough for a tree)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def rooms_of(folder: str, edges: dict[str, set[str]]) -> dict:
    """The rooms of ``folder``, the arrows between them, the upward ones and the file circles inside."""
    def room(f):
        rest = f[len(folder) + 1:].split("/")
        return None if rest == ["__init__.py"] else rest[0]

    inside = [f for f in edges if f.startswith(folder + "/")]
    arrows = {(room(a), room(b)) for a in inside for b in edges[a]
              if b.startswith(folder + "/") and room(a) and room(b) and room(a) != room(b)}
    names = {room(f) for f in inside} - {None}
    loops = _sccs(names, {r: {b for a, b in arrows if a == r} for r in names})
    upward = sorted((a, b) for a, b in arrows if any(a in c and b in c for c in loops))
    circles = sorted(sorted(c) for c in _sccs(inside, {f: edges[f] & set(inside) for f in inside}))
    return {"folder": folder, "rooms": len(names), "arrows": len(arrows), "upward": upward,
            "room_loops": [sorted(c) for c in loops], "file_circles": circles}


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(__doc__.strip())
        print("\nOptions: FOLDER ... (default: model inkling_probe), --json (one JSON object a folder)")
        return 0
    unknown = [a for a in argv if a.startswith("-") and a != "--json"]
    folders = [a.rstrip("/") for a in argv if not a.startswith("-")] or ["model", "inkling_probe"]
    missing = [f for f in folders if not (ROOT / f).is_dir()]
    if unknown or missing:  # (a folder that is not there has no loops: no all-clear for it)
        what = f"unknown option {unknown[0]!r}" if unknown else f"{ROOT / missing[0]}: no such folder"
        print(f"structure.py: {what} (--help)", file=sys.stderr)
        return 2
    edges = graph()
    as_json = "--json" in argv
    for folder in folders:
        r = rooms_of(folder, edges)
        if as_json:
            print(json.dumps(r))
            continue
        print(f"{r['folder']}/: {r['rooms']} rooms, {r['arrows']} arrows, {len(r['room_loops'])} loops between "
              f"rooms ({len(r['upward'])} upward imports in them), {len(r['file_circles'])} file circles")
        for a, b in r["upward"]:
            print(f"  upward: {a} -> {b}")
        for c in r["file_circles"]:
            print(f"  circle: {' -> '.join(c)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
