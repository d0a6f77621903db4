"""``torch.save`` files read as untrusted input: what they declare is checked against the file
before a tensor is built over its bytes.

A zip-format file (torch >= 1.6) is ``<dir>/data.pkl`` (the object tree; storages referenced by key
with a dtype and element count) and one stored member ``<dir>/data/<key>`` per storage. It is
unpickled here with torch's weights-only unpickler (nothing in a pickle runs) and a
``persistent_load`` that hands each storage out only when its member exists, is stored
uncompressed and holds exactly the bytes declared (torch's memory-mapped loader would read on into
the zip's own bytes); the storage is then a slice of the file mapped once, so torch checks every
tensor's offset, size and strides against it. The legacy format (one pickle stream, storages
after it) is unpickled over storages on the ``meta`` device first: their declared bytes must fit
the file before torch's own loader allocates them.

The object tree is flattened to ``{name: tensor}``: dict keys and list indices joined by dots. Two
paths to one name (``{'a.b': t1, 'a': {'b': t2}}``) and a container reached twice (pickle shares
objects: ``l = [l, l]`` 60 times over is 2**60 paths in 1.6 KB) are refused, nesting is bounded by
:data:`MAX_NESTING`, and what the tensors read as is bounded by the file's size (limits.py).
"""
from __future__ import annotations

import io
import os
import struct
import zipfile

from inkling_probe.errors import DumpError
from inkling_probe.store.foreign.limits import check_reads_as

MAX_NESTING = 64  # dicts/lists inside one another (a module's outputs nest two or three deep)
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length


def load_tree(path: str):
    """The object ``path`` holds, its tensors over the file's bytes (zip: memory-mapped)."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == b"PK\x03\x04":
        return _load_zip(path)
    return _load_legacy(path)


def flatten(path: str, obj, prefix: str = "") -> dict:
    """``{name: tensor}`` of a tree of dicts, lists and tuples (None items skipped), every name once."""
    import torch

    out: dict = {}
    seen: dict[int, str] = {}
    stack = [(prefix, obj, 0)]
    while stack:
        name, node, depth = stack.pop()
        if isinstance(node, torch.Tensor):
            if name in out:
                raise DumpError(f"{path}: two tensors are named {name!r} (a dict key with a dot and a nested "
                                "dict, or a key given twice); refused: one would be dropped")
            out[name] = node
            continue
        if node is None and name:  # an absent item of a module's output tuple, e.g. (out, bias=None)
            continue
        if not isinstance(node, (dict, list, tuple)):
            where = f" at {name!r}" if name else ""
            raise DumpError(f"{path}: holds a {type(node).__name__}{where}, not a tensor; only tensors "
                            "(or dicts/lists of tensors) are read from .pt files")
        if node and id(node) in seen:  # (empty ones hold nothing; Python shares the empty tuple)
            raise DumpError(f"{path}: one {type(node).__name__} is reached at {_short(seen[id(node)])} and at "
                            f"{_short(name)}; shared containers are refused (each path would list it again)")
        seen[id(node)] = name
        if depth >= MAX_NESTING:
            raise DumpError(f"{path}: containers nested deeper than {MAX_NESTING} at {_short(name)}; not a dump")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        children = [(f"{name}.{k}" if name else str(k), v, depth + 1) for k, v in items]
        stack.extend(reversed(children))
    _check_sizes(path, out)
    return out


def _short(name: str) -> str:
    return repr(name) if len(name) <= 60 else repr(name[:28] + "..." + name[-28:])


def _check_sizes(path: str, tensors: dict) -> None:
    """Strides >= 0, and the bytes every tensor reads as (stride 0 repeats, shared storages count
    once per name) within the file's bound."""
    total = 0
    for name, t in tensors.items():
        if any(s < 0 for s in t.stride()):
            raise DumpError(f"{path}: tensor {name!r} has a negative stride {tuple(t.stride())}; refused")
        total += t.numel() * t.element_size()
    check_reads_as(path, os.path.getsize(path), total)


# -- zip format -------------------------------------------------------------------------------------
def _load_zip(path: str):
    import torch

    size = os.path.getsize(path)
    torch._C.PyTorchFileReader(path)  # torch's own reading of the archive's directory: what it refuses, we do
    with zipfile.ZipFile(path) as z:
        records = {i.filename: i for i in z.infolist()}
        if len(records) != len(z.infolist()):
            raise DumpError(f"{path}: a zip member name appears twice; not a torch file")
        for info in records.values():  # torch's reader refuses the archive over any member's sizes
            if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
                raise DumpError(f"{path}: member {info.filename[:80]!r} is compressed or its sizes disagree "
                                f"({info.compress_size} stored, {info.file_size} declared); torch.save stores "
                                "members as they are")
        pkl = [n for n in records if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pkl) != 1:
            raise DumpError(f"{path}: {len(pkl)} data.pkl members; not a torch file")
        prefix = pkl[0][: -len("data.pkl")]
        _check_byteorder(path, z, prefix + "byteorder")
        data = _stored(path, z, records[pkl[0]], size)
        spans = {}
        with open(path, "rb") as fh:
            for name, info in records.items():
                if name.startswith(prefix + "data/"):
                    spans[name[len(prefix) + 5:]] = _data_span(path, fh, info, size)
    whole = torch.UntypedStorage.from_file(path, False, size) if spans else None

    def storage(key: str, dtype, nbytes: int):
        if key not in spans:
            raise DumpError(f"{path}: storage {key!r} has no record data/{key} in the archive")
        start, length = spans[key]
        if length != nbytes:
            raise DumpError(f"{path}: record data/{key} holds {length} bytes, its storage declares {nbytes} "
                            f"({dtype}); the file lies about its size")
        return whole[start: start + nbytes]

    return _Unpickler(path, io.BytesIO(data), storage).load()


def _check_byteorder(path: str, z: zipfile.ZipFile, name: str) -> None:
    """torch.save writes 'little' on this machine's kind (absent in old files: little too)."""
    if name in z.namelist() and (z.getinfo(name).file_size > 16 or z.read(name) != b"little"):
        raise DumpError(f"{path}: its byteorder record is not 'little'; only little-endian torch files are read")


def _stored(path: str, z: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> bytes:
    if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
        raise DumpError(f"{path}: member {info.filename!r} is compressed or larger than the file; torch.save "
                        "stores members as they are")
    return z.read(info)


def _data_span(path: str, fh, info: zipfile.ZipInfo, size: int) -> tuple[int, int]:
    """(offset of the member's bytes in the file, their length), checked to lie inside the file."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise DumpError(f"{path}: record {info.filename!r} is compressed; torch.save stores records as they are")
    fh.seek(info.header_offset)
    head = fh.read(_LOCAL_HEADER.size)
    if len(head) < _LOCAL_HEADER.size or _LOCAL_HEADER.unpack(head)[0] != b"PK\x03\x04":
        raise DumpError(f"{path}: record {info.filename!r}: no local header at offset {info.header_offset}")
    _, name_len, extra_len = _LOCAL_HEADER.unpack(head)
    start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    if start + info.file_size > size:
        raise DumpError(f"{path}: record {info.filename!r} ({info.file_size} bytes at {start}) runs past the "
                        f"end of the file ({size} bytes)")
    return start, info.file_size


# -- legacy format ----------------------------------------------------------------------------------
def _load_legacy(path: str):
    """Declared storages on ``meta`` first (their bytes must fit the file), then torch's own loader."""
    import torch

    size = os.path.getsize(path)
    declared = {}

    def storage(key: str, dtype, nbytes: int):
        declared[key] = nbytes
        return torch.UntypedStorage(nbytes, device="meta")

    with open(path, "rb") as fh:
        for _ in range(3):  # magic number, protocol version, system info
            _Unpickler(path, fh, None).load()
        _Unpickler(path, fh, storage).load()
    if sum(declared.values()) > size:
        raise DumpError(f"{path}: its storages declare {sum(declared.values())} bytes in a file of {size}; "
                        "the file lies about its size")
    return torch.load(path, map_location="cpu", weights_only=True)


def _unpickler_class():
    from torch._weights_only_unpickler import Unpickler

    return Unpickler


class _Unpickler:
    """torch's weights-only unpickler whose storages come from ``storage(key, dtype, nbytes)``."""

    def __init__(self, path: str, file, storage):
        self.path, self.file, self.storage = path, file, storage
        self.made: dict[str, object] = {}

    def load(self):
        unpickler = _unpickler_class()(self.file, encoding="utf-8")
        unpickler.persistent_load = self._persistent_load
        return unpickler.load()

    def _persistent_load(self, pid):
        import torch

        if self.storage is None or not isinstance(pid, tuple) or len(pid) not in (5, 6):
            raise DumpError(f"{self.path}: a storage reference {str(pid)[:60]!r} that torch.save does not write")
        storage_type, key, numel = pid[1], str(pid[2]), pid[4]
        if len(pid) == 6 and pid[5] is not None:
            raise DumpError(f"{self.path}: storage {key!r} is a view of another (a pre-1.6 format); not read")
        dtype = torch.uint8 if storage_type is torch.UntypedStorage else getattr(storage_type, "dtype", None)
        if not isinstance(dtype, torch.dtype) or not isinstance(numel, int) or numel < 0:
            raise DumpError(f"{self.path}: storage {key!r} declares {numel!r} elements of {storage_type!r}")
        nbytes = numel * torch._utils._element_size(dtype)
        if key not in self.made:
            self.made[key] = (torch.storage.TypedStorage(wrap_storage=self.storage(key, dtype, nbytes), dtype=dtype,
                                                         _internal=True), nbytes)
        typed, made_bytes = self.made[key]
        if made_bytes != nbytes or typed.dtype != dtype:
            raise DumpError(f"{self.path}: storage {key!r} is declared twice, as {made_bytes} and {nbytes} bytes")
        return typed
