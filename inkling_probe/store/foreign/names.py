"""Which files a foreign dump holds and who recorded each: key, step, rank, call and run, from names.

Four naming schemes (docs/INTEROP.md):

- SGLang's dumper (``sglang.srt.debug_utils.dumper``): file names are ``k=v`` tags joined by ``___``.
  Older versions write ``forward_pass_id=<step>___name=<name>___<tags>.pt`` into one folder per
  rank, ``sglang_dump_<run>_<tp rank>/``; newer ones write ``step=<s>___rank=<r>___dump_index=<i>___
  name=<name>___<tags>.pt`` for every rank into one experiment folder. The key is the name, then the
  other tags (``layer_id=3`` -> ``<name>.layer_id=3``; a ``layer_id`` equal to the ``layers.<n>``
  already in the name is dropped); calls of one key in a step are told apart by dump order. Names its
  non-intrusive forward hooks give (``non_intrusive__<module>.output.0``) read as our own hooks name
  them (``<module>.0``, inputs ``<module>.in.0``), so transformers' module paths meet hf_inkling.
- SGLang's per-module forward-hook dumps: ``TP<t>_PP<p>_Rank<r>_pid<n>/Pass<NNNNN>.pt``, each a dict
  of module path -> output for one forward pass.
- A pattern (``pattern=``): a regex over each file's path inside the folder with named groups
  ``key`` (else the path without extension, ``/`` -> ``.``), ``step``, ``rank``, ``call``.
- Anything else: the key is the path inside the folder without extension (``/`` -> ``.``), step 0,
  rank 0.

Files are told apart by content (store/foreign/sniff.py); dot files and the ``inkling_probe.toml``
settings file are skipped; anything else that is not a tensor file is refused.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from inkling_probe.errors import DumpError
from inkling_probe.regex_safety import compile_bounded
from inkling_probe.store.foreign.sniff import sniff

SETTINGS_FILE = "inkling_probe.toml"
MAX_DEPTH = 4
MAX_FILES = 1_000_000
EXTENSION = re.compile(r"\.(?:pt|pth|bin|safetensors|npz|npy)$")  # cut from names (a module path has dots)
LEGACY_DIR = re.compile(r"^sglang_dump_(.+)_(\d+)$")
HOOK_DIR = re.compile(r"^TP(\d+)_PP(\d+)_Rank(\d+)_pid(\d+)$")  # SGLang's tensor_dump_forward_hook
HOOK_FILE = re.compile(r"^Pass(\d+)\.pt$")
HOOK_PREFIX = "non_intrusive__"
_BOOKKEEPING = {"forward_pass_id", "step", "rank", "dump_index", "name", "recompute_status",
                "pp_rank", "tp_rank", "cp_rank", "ep_rank", "etp_rank"}


@dataclass
class Source:
    """One foreign file and who recorded it."""

    path: str
    fmt: str
    key: str  # the key before the name map ('' for a whole-file dump: the tensors' own names)
    step: int
    rank: int
    run: str  # files of one run share it
    order: tuple  # execution order within a step (dump index, then name)
    call: int | None = None  # given by a pattern; else counted in order
    scheme: str = "files"  # how it was named: "sglang dumper", "pattern", "files"


def list_sources(root: str, pattern: str | None = None) -> list[Source]:
    """Every tensor file under ``root`` (a folder or one file) with its identity."""
    if os.path.islink(root):
        raise DumpError(f"{root}: a symbolic link; give the folder or file it points to")
    if os.path.isfile(root):
        _check_name(root)
        fmt = _fmt(root)
        return [Source(root, fmt, "", 0, 0, "", (0,))]
    files = _walk(root)
    if not files:
        raise DumpError(f"{root}: no files: not a dump")
    regex = _compile(pattern) if pattern else None
    out = [_identify(root, rel, regex) for rel in files]
    return out


def _compile(pattern: str) -> re.Pattern:
    try:
        return compile_bounded(pattern)
    except (re.error, ValueError, RecursionError) as e:
        raise DumpError(f"pattern {pattern!r}: {e}") from None


def _walk(root: str) -> list[str]:
    out = []
    stack = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        folder = os.path.join(root, rel)
        for name in sorted(os.listdir(folder)):
            if name.startswith(".") or (not rel and name == SETTINGS_FILE):
                continue
            sub = os.path.join(rel, name) if rel else name
            _check_name(os.path.join(root, sub))
            mode = os.lstat(os.path.join(root, sub)).st_mode
            if stat.S_ISDIR(mode):
                if depth + 1 >= MAX_DEPTH:
                    raise DumpError(f"{os.path.join(root, sub)}: folders nested deeper than {MAX_DEPTH}; not a dump")
                stack.append((sub, depth + 1))
            elif stat.S_ISREG(mode):
                out.append(sub)
            else:
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise DumpError(f"{os.path.join(root, sub)}: {kind}; a dump holds regular files only")
            if len(out) > MAX_FILES:
                raise DumpError(f"{root}: more than {MAX_FILES} files; not read")
    return sorted(out)


def _check_name(path: str) -> None:
    """A file name that is not UTF-8 (its bytes kept as surrogates) can't become a key; refused by name."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise DumpError(f"{shown}: a file name that is not UTF-8; rename it to read the dump") from None


def _fmt(path: str) -> str:
    fmt = sniff(path)
    if fmt is None or fmt == "hdf5":
        what = "an HDF5 file that is not a segment of an inkling-probe dump" if fmt else \
            "not a tensor file (.pt, .safetensors, .npz or .npy, told by content)"
        raise DumpError(f"{path}: {what}")
    return fmt


def _identify(root: str, rel: str, regex: re.Pattern | None) -> Source:
    path = os.path.join(root, rel)
    fmt = _fmt(path)
    parts = rel.split(os.sep)
    if regex is not None:
        return _by_pattern(path, rel, fmt, regex)
    tags = parse_tags(parts[-1])
    if tags is not None and "name" in tags:
        return _sglang(root, path, parts, fmt, tags)
    hooks = _sglang_hooks(root, path, parts, fmt)
    if hooks is not None:
        return hooks
    return Source(path, fmt, _stem_key(rel), 0, 0, "", (rel,))


def _sglang_hooks(root: str, path: str, parts: list[str], fmt: str) -> Source | None:
    """SGLang's per-module forward-hook dump (``--debug-tensor-dump-output-folder``): one folder per
    rank, ``TP<t>_PP<p>_Rank<r>_pid<n>/``, one ``Pass<NNNNN>.pt`` per forward holding ``{module path:
    output}``; the rank is ``Rank``, the step the pass, the keys the module paths."""
    m = HOOK_FILE.match(parts[-1])
    folder = parts[-2] if len(parts) > 1 else os.path.basename(os.path.normpath(root))
    d = HOOK_DIR.match(folder)
    if m is None or d is None:
        return None
    run = os.sep.join(parts[:-2])
    return Source(path, fmt, "", int(m[1]), int(d[3]), run, (int(m[1]),), scheme="sglang forward hooks")


def parse_tags(filename: str) -> dict | None:
    """``a=1___b=x.pt`` -> {'a': '1', 'b': 'x'}; None when the name is not all ``k=v`` tags."""
    stem = EXTENSION.sub("", filename)
    out = {}
    for part in stem.split("___"):
        k, sep, v = part.partition("=")
        if not sep or not k:
            return None
        out[k] = v
    return out


def _sglang(root: str, path: str, parts: list[str], fmt: str, tags: dict) -> Source:
    legacy = next((LEGACY_DIR.match(p) for p in [os.path.basename(os.path.normpath(root))] + parts[:-1][::-1]
                   if LEGACY_DIR.match(p)), None)
    step = _int(path, tags, "step") if "step" in tags else _int(path, tags, "forward_pass_id")
    if "rank" in tags:
        rank = _int(path, tags, "rank")
    elif "tp_rank" in tags:
        rank = _int(path, tags, "tp_rank")
    elif legacy:
        rank = int(legacy[2])
    else:
        rank = 0
    run = legacy[1] if legacy else os.sep.join(parts[:-1])
    extra = {k: v for k, v in tags.items() if k not in _BOOKKEEPING}
    name = hook_name(tags["name"])
    if "layer_id" in extra and f"layers.{extra['layer_id']}." in name + ".":
        extra.pop("layer_id")
    key = name + "".join(f".{k}={v}" for k, v in extra.items())
    order = (int(tags["dump_index"]) if tags.get("dump_index", "").isdigit() else 0, parts[-1])
    return Source(path, fmt, key, step, rank, run, order, scheme="sglang dumper")


def hook_name(name: str) -> str:
    """SGLang's non-intrusive hook names in our hooks' naming (hooks.py), so one name map serves both:
    ``non_intrusive__<module>.output[.<i>]`` -> ``<module>[.<i>]``, ``...inputs.<i>`` ->
    ``<module>.in.<i>``; the root module's output is ``output``. Other names are kept."""
    if not name.startswith(HOOK_PREFIX):
        return name
    parts = name[len(HOOK_PREFIX):].split(".")
    at = max((i for i, p in enumerate(parts) if p in ("output", "inputs")), default=None)
    if at is None:
        return name
    module, tail = parts[:at], parts[at + 1:]
    if parts[at] == "inputs":
        return ".".join(module + ["in"] + tail)
    return ".".join(module + tail) if module else ".".join(["output"] + tail)


def _int(path: str, tags: dict, name: str) -> int:
    """A step or rank tag: a number >= 0 (a rank of -1 or a step of -3 is no rank or step)."""
    v = tags.get(name)
    if v is None or v == "None":  # the old dumper writes forward_pass_id=None outside a forward
        return 0
    try:
        n = int(v)
    except ValueError:
        raise DumpError(f"{path}: tag {name}={v!r} is not an integer") from None
    if n < 0:
        raise DumpError(f"{path}: tag {name}={v}: a {name.replace('_', ' ')} is a number >= 0")
    return n


def _by_pattern(path: str, rel: str, fmt: str, regex: re.Pattern) -> Source:
    m = regex.fullmatch(rel.replace(os.sep, "/"))
    if m is None:
        raise DumpError(f"{path}: its name does not match the pattern {regex.pattern!r}")
    groups = m.groupdict()
    key = groups.get("key") or _stem_key(rel)
    nums = {}
    for g in ("step", "rank", "call"):
        v = groups.get(g)
        if v is not None and not (v.isdecimal() and v.isascii()):
            raise DumpError(f"{path}: pattern group {g!r} matched {v!r}, not a number")
        nums[g] = int(v) if v is not None else None
    return Source(path, fmt, key, nums["step"] or 0, nums["rank"] or 0, "", (rel,), nums["call"], "pattern")


def _stem_key(rel: str) -> str:
    return EXTENSION.sub("", rel).replace(os.sep, ".")
