"""Tensors out of foreign files, in the reader's numpy conventions (store/dump.py ``Dump.array``):
bf16 as its exact float32, 8-bit floats as their exact float16, packed fp4 as its bytes.

Each loader lists a file's tensors (:func:`describe`: name inside the file, shape, dtype, meta)
from what the file declares, checked against the file before any tensor is built over its bytes,
and loads one (:func:`load`). ``.pt`` files go through torch's weights-only unpickler
(torch_files.py: nothing in a pickle is executed; anything that is not a tensor, a dict/list of
tensors (None items, as in a linear's ``(out, None)``, are skipped), or SGLang's dumper payload
``{"value": tensor, "meta": {...}}`` is refused); torch is imported there and nowhere else on the
read side. ``.npy``/``.npz`` headers are read without their data (numpy_files.py, never a
pickle); a safetensors header is parsed once per file (store/safetensors_header.py, every entry
checked) and each tensor read at its offset.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from inkling_probe.errors import DumpError, ProbeError
from inkling_probe.store.foreign import numpy_files
from inkling_probe.store.stats import bf16_bits_to_float32


@dataclass
class Item:
    """One tensor inside a file: its name there ('' for a file holding one bare tensor)."""

    name: str
    shape: tuple
    dtype: str  # torch's dtype name: 'bfloat16', 'float32', ...
    meta: dict = field(default_factory=dict)


def describe(path: str, fmt: str) -> list[Item]:
    """The tensors ``path`` holds (a DumpError naming the file when it can't be read as ``fmt``)."""
    try:
        return _DESCRIBE[fmt](path)
    except ProbeError:  # DumpError, BadSafetensors, SettingsError: one line already
        raise
    except Exception as e:  # noqa: BLE001 - damaged files raise anything: one line naming the file
        raise DumpError(f"{path}: can't be read as {fmt} ({_first_line(e)[:120]})") from None


def load(path: str, fmt: str, name: str) -> np.ndarray:
    """One tensor of ``path`` as numpy (reader conventions)."""
    try:
        return _LOAD[fmt](path, name)
    except ProbeError:  # DumpError, BadSafetensors, SettingsError: one line already
        raise
    except Exception as e:  # noqa: BLE001
        raise DumpError(f"{path}: can't read tensor {name or '(the file)'!r} ({_first_line(e)[:120]})") from None


def _first_line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else type(e).__name__


# -- .pt (torch.save) ------------------------------------------------------------------------
_PT_CACHE: dict[str, dict] = {}  # one file's tensors, the last one loaded (a key is read rank by rank)


def _identity(path: str) -> tuple:
    """What a cached reading of ``path`` must still match: the same file, size and modification time."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _pt_tensors(path: str) -> dict:
    """{name: tensor} and the dumper meta of a .pt file, loaded once per file in a row (while unchanged)."""
    identity = _identity(path)
    cached = _PT_CACHE.get(path)
    if cached is not None and cached["identity"] == identity:
        return cached
    obj = _torch_load(path)
    meta = {}
    if isinstance(obj, dict) and set(obj) == {"value", "meta"} and isinstance(obj["meta"], dict):
        meta = _plain_meta(path, obj["meta"])  # SGLang's dumper: {"value": tensor, "meta": {...}}
        obj = obj["value"]
    from inkling_probe.store.foreign.torch_files import flatten

    tensors = flatten(path, obj)
    _PT_CACHE.clear()
    _PT_CACHE[path] = {"tensors": tensors, "meta": meta, "identity": identity}
    return _PT_CACHE[path]


def _torch_load(path: str):
    """The file's object tree (torch_files.py: declared sizes checked first); every failure one line."""
    import pickle
    import zipfile

    from inkling_probe.store.foreign.torch_files import load_tree

    try:
        return load_tree(path)
    except pickle.UnpicklingError as e:
        raise DumpError(f"{path}: refused: torch.load(weights_only=True) will not unpickle it "
                        f"({_why_refused(e)}); only tensors are read from .pt files") from None
    except RuntimeError as e:
        if "resize" in str(e) or "out of bounds" in str(e):
            raise DumpError(f"{path}: a tensor reaches past the end of its storage; the file lies about "
                            "its sizes") from None
        raise DumpError(f"{path}: truncated or not a readable torch file ({_first_line(e)[:100]})") from None
    except (EOFError, OSError, ValueError, zipfile.BadZipFile, struct.error) as e:
        raise DumpError(f"{path}: truncated or not a readable torch file ({_first_line(e)[:100]})") from None


def _why_refused(e: BaseException) -> str:
    """The line of torch's weights-only message that names what was refused."""
    for line in str(e).splitlines():
        if "nsupported" in line or "WeightsUnpickler error" in line:
            return line.strip()[:120]
    return _first_line(e)[:120]


def _plain_meta(path: str, meta: dict) -> dict:
    """The dumper's meta, kept where it is plain JSON data (numbers, strings, lists, dicts)."""
    try:
        return json.loads(json.dumps(meta, default=str))
    except (TypeError, ValueError, RecursionError):
        return {}


def _describe_pt(path: str) -> list[Item]:
    from inkling_probe.store.dtypes import dtype_name

    got = _pt_tensors(path)
    if not got["tensors"]:
        raise DumpError(f"{path}: holds no tensor")
    return [Item(n, tuple(t.shape), dtype_name(t.dtype), got["meta"]) for n, t in got["tensors"].items()]


def _load_pt(path: str, name: str) -> np.ndarray:
    from inkling_probe.store.dtypes import encode

    t = _pt_tensors(path)["tensors"][name]
    array, _ = encode(t.detach().contiguous())
    if array.dtype == np.uint16 and str(t.dtype) == "torch.bfloat16":
        array = bf16_bits_to_float32(array)
    return np.array(array).reshape(tuple(t.shape))  # a copy: the mapped file may go


# -- .npy / .npz (numpy_files.py) -----------------------------------------------------------
def _describe_npy(path: str) -> list[Item]:
    return [Item(*entry) for entry in numpy_files.describe_npy(path)]


def _describe_npz(path: str) -> list[Item]:
    return [Item(*entry) for entry in numpy_files.describe_npz(path)]


def _load_npy(path: str, name: str) -> np.ndarray:
    return numpy_files.load_npy(path)


def _load_npz(path: str, name: str) -> np.ndarray:
    return numpy_files.load_npz(path, name)


# -- .safetensors -----------------------------------------------------------------------------
_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16", "U32": "uint32",
              "U64": "uint64", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_NP = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": np.uint16,
       "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8, "uint8": np.uint8,
       "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_,
       "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}
_ST_CACHE: dict[str, tuple] = {}  # the last safetensors file's header, by path, while the file is unchanged


def _st_header(path: str) -> tuple[dict, int]:
    """Every entry checked against the file (store/safetensors_header.py), in a dtype read here;
    parsed once per file (reading many tensors of one file is linear in their number)."""
    from inkling_probe.store.safetensors_header import read_header

    identity = _identity(path)
    cached = _ST_CACHE.get(path)
    if cached is not None and cached[0] == identity:
        return cached[1], cached[2]
    header, base = read_header(path)
    for name, info in header.items():
        if info["dtype"] not in _ST_DTYPES:
            raise DumpError(f"{path}: tensor {name!r}: unknown safetensors dtype {info['dtype']!r}")
    _ST_CACHE.clear()
    _ST_CACHE[path] = (identity, header, base)
    return header, base


def _describe_safetensors(path: str) -> list[Item]:
    header, _ = _st_header(path)
    return [Item(n, tuple(i["shape"]), _ST_DTYPES[i["dtype"]]) for n, i in header.items()]


def _load_safetensors(path: str, name: str) -> np.ndarray:
    header, base = _st_header(path)
    info = header[name]
    dtype = _ST_DTYPES[info["dtype"]]
    start, stop = info["data_offsets"]
    with open(path, "rb") as fh:
        fh.seek(base + start)
        data = fh.read(stop - start)
    if len(data) != stop - start:
        raise DumpError(f"{path}: tensor {name!r}: the file ends inside its data (file changed?)")
    raw = np.frombuffer(data, dtype=_NP[dtype]).reshape(info["shape"])
    if dtype == "bfloat16":
        return bf16_bits_to_float32(raw)
    if dtype.startswith("float8"):
        import torch

        from inkling_probe.store.dtypes import encode
        return encode(torch.from_numpy(raw.copy()).view(getattr(torch, dtype)))[0]
    return raw.copy()


def forget(path: str | None = None) -> None:
    """Drop what is cached of ``path`` (every file: None): mapped .pt tensors, a safetensors header."""
    for cache in (_PT_CACHE, _ST_CACHE):
        if path is None:
            cache.clear()
        else:
            cache.pop(path, None)


_DESCRIBE = {"pt": _describe_pt, "npy": _describe_npy, "npz": _describe_npz, "safetensors": _describe_safetensors}
_LOAD = {"pt": _load_pt, "npy": _load_npy, "npz": _load_npz, "safetensors": _load_safetensors}
