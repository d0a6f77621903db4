"""A tiny NVFP4 checkpoint shared by the bisect tests (written once per session), and edits of it."""
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

# This folder has no __init__.py (a package named `bisect` would shadow the standard library's),
# so the shared helper tests/inkling_probe/dumps.py is put on the path here.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

@pytest.fixture(scope="session")
def nvfp4_ckpt(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    out = tmp_path_factory.mktemp("ckpt") / "tiny-nvfp4"
    write_random_checkpoint(InklingConfig.preset("tiny", quant_method="nvfp4"), out, seed=0, quant="nvfp4")
    return out


def tensor_bytes(file: Path, name: str, itemsize: int = 1) -> np.memmap:
    """A writable view of one tensor's raw bytes (as uint of ``itemsize``), in its shape."""
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n))[name]
    a, b = meta["data_offsets"]
    shape = tuple(meta["shape"])
    return np.memmap(file, dtype=f"<u{itemsize}", mode="r+", offset=8 + n + a, shape=shape)


def shard_of(ckpt: Path, name: str) -> Path:
    """The safetensors file of a checkpoint dir that holds ``name``."""
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    return ckpt / index["weight_map"][name]


@pytest.fixture
def corrupted_copy():
    """``(ckpt, dest, name, edit, itemsize=1)``: a copy of ckpt with ``edit(view)`` applied to one tensor."""
    return _corrupted_copy


def _corrupted_copy(ckpt, dest, name, edit, itemsize=1):
    """A copy of ``ckpt`` with ``edit(view)`` applied to tensor ``name``'s raw values."""
    shutil.copytree(ckpt, dest)
    view = tensor_bytes(shard_of(dest, name), name, itemsize)
    edit(view)
    view.flush()
    return dest
