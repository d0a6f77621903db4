"""Checkpoints in the native Inkling layout: writing shards and the index, reading them back.

The synthetic (random) checkpoints live in :mod:`inkling_model.checkpoint.synthetic`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


INDEX_NAME = "model.safetensors.index.json"
DEFAULT_SHARD_BYTES = 512 * 2**20


class CheckpointError(ValueError):
    """A checkpoint that does not match the layout: missing, unexpected or mis-shaped tensors."""


class CheckpointExistsError(FileExistsError):
    """The output directory exists and is not empty."""


def check_layout(tensors: dict[str, torch.Tensor], layout: dict, where: str = "checkpoint") -> None:
    """Raise CheckpointError naming the first missing, unexpected or mis-shaped tensor."""
    for name in tensors:
        if name not in layout:
            raise CheckpointError(f"{where}: unexpected tensor {name}")
    for name, (shape, dtype) in layout.items():
        if name not in tensors:
            raise CheckpointError(f"{where}: missing tensor {name}")
        t = tensors[name]
        if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            raise CheckpointError(f"{where}: {name} is {tuple(t.shape)} {t.dtype}, "
                                  f"layout says {tuple(shape)} {dtype}")


def _refuse_nonempty(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise CheckpointExistsError(f"{out_dir} exists and is not empty; refusing to overwrite it")


def _shards(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[list[str]]:
    shards, current, size = [], [], 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += nbytes
    return shards + ([current] if current else [])


def save_tensors(tensors: dict[str, torch.Tensor], out_dir: Path, max_shard_bytes: int) -> None:
    """Safetensors shards plus model.safetensors.index.json (HF's sharded layout)."""
    from safetensors.torch import save_file

    groups = _shards(tensors, max_shard_bytes)
    weight_map, total = {}, 0
    for k, names in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n].contiguous() for n in names}, str(out_dir / fname), metadata={"format": "pt"})
        for n in names:
            weight_map[n] = fname
            total += tensors[n].numel() * tensors[n].element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")


def checkpoint_files(ckpt_dir) -> dict[str, str]:
    """name -> shard file of a checkpoint dir (from the index, or the single model.safetensors)."""
    ckpt_dir = Path(ckpt_dir)
    index = ckpt_dir / INDEX_NAME
    if index.exists():
        weight_map = _weight_map(index)
        for fname in sorted(set(weight_map.values())):
            if not (ckpt_dir / fname).exists():
                raise CheckpointError(f"{ckpt_dir}: {INDEX_NAME} names {fname}, which is missing")
        return weight_map
    single = ckpt_dir / "model.safetensors"
    if not single.exists():
        raise CheckpointError(f"{ckpt_dir}: no {INDEX_NAME} and no model.safetensors")
    with _open_shard(single) as f:
        return {k: "model.safetensors" for k in f.keys()}


def _weight_map(index: Path) -> dict[str, str]:
    """The index's ``weight_map`` (name -> shard file), checked: a damaged index is one line."""
    from inkling_probe.store.inputs import BadInputFile, read_text

    try:
        weight_map = json.loads(read_text(index, "checkpoint index"))["weight_map"]
    except BadInputFile as e:
        raise CheckpointError(str(e)) from None
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str) and "/" not in v
                                                   for k, v in weight_map.items()):
        raise CheckpointError(f"{index}: weight_map is not {{tensor name: shard file name}}")
    return weight_map


def _open_shard(path: Path):
    """``safe_open`` once the header is checked against the file (store/safetensors_header.py): a
    damaged shard is a one-line CheckpointError (exit 2), not a SafetensorError."""
    from safetensors import safe_open

    from inkling_probe.store.safetensors_header import BadSafetensors, read_header

    try:
        read_header(path)
        return safe_open(str(path), framework="pt")
    except BadSafetensors as e:
        raise CheckpointError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - safetensors' own error for what the check let through
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e})") from None


def iter_tensors(ckpt_dir, names=None):
    """Yield (file, name, tensor) from a checkpoint dir, one shard open at a time (no pickles)."""
    ckpt_dir = Path(ckpt_dir)
    weight_map = checkpoint_files(ckpt_dir)
    wanted = set(weight_map) if names is None else set(names)
    by_file: dict[str, list[str]] = {}
    for name, fname in weight_map.items():
        if name in wanted:
            by_file.setdefault(fname, []).append(name)
    for fname, keys in sorted(by_file.items()):
        with _open_shard(ckpt_dir / fname) as f:
            present = set(f.keys())
            for key in keys:
                if key not in present:
                    raise CheckpointError(f"{ckpt_dir / fname}: index lists {key}, the file lacks it")
                yield fname, key, f.get_tensor(key)


def read_tensors(ckpt_dir) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint dir, by name."""
    return {name: t for _, name, t in iter_tensors(ckpt_dir)}

