"""The weight mapper: native Inkling safetensors -> the model's parameters, through their weight_loaders.

Per tensor: strip ``model.llm.``; NVFP4 ``*_input_amax`` becomes ``*_input_scale = amax / (6 * 448)``;
then the parameter at that module path takes it with ``param.weight_loader(param, full_tensor)``
(each layer class slices its own TP shard). Every checkpoint tensor is checked against the layout
(layout.native_shapes) first, and every parameter must be loaded exactly once: a
missing, unexpected or mis-shaped tensor is a one-line CheckpointError naming file and key.
Multimodal towers (``model.visual.*``, ``model.audio.*``) and MTP layers are not part of the text
model and are skipped (counted in the returned report).

Planted faults (faults.py): ``raw_input_amax`` renames input_amax without the division;
``gate_up_layout`` reorders the routed experts' interleaved w13 rows as if they were [gate; up].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from inkling_model.switches import faults
from inkling_model.checkpoint.shards import CheckpointError, iter_tensors
from inkling_model.checkpoint.layout import PREFIX, native_shapes
from inkling_model.layers.loading import replicated_loader
from inkling_model.nvfp4 import SCALE_DENOM

SKIPPED_PREFIXES = ("model.visual.", "model.audio.", "model.mtp.")
_PACKED = (torch.uint8, torch.float8_e4m3fn)


@dataclass
class LoadReport:
    """What load_checkpoint did: tensors loaded, skipped (towers) and the faults applied."""

    loaded: int = 0
    skipped: int = 0
    faults: list[str] = field(default_factory=list)


def loadable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Module path -> parameter (or buffer carrying a weight_loader) that a checkpoint fills."""
    out = dict(model.named_parameters())
    out.update({n: b for n, b in model.named_buffers() if hasattr(b, "weight_loader")})
    return out


def concat_to_interleaved(t: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """[gate; up] rows along dim -> [g0, u0, g1, u1, ...] (applied to interleaved rows: the fault)."""
    n = t.shape[dim]
    return t.unflatten(dim, (2, n // 2)).transpose(dim, dim + 1).flatten(dim, dim + 1).contiguous()


def map_tensor(name: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
    """Native name and tensor -> (module path, tensor in the model's logical format)."""
    key = name[len(PREFIX):]
    if key.endswith("_input_amax"):
        key = key[: -len("_input_amax")] + "_input_scale"
        if not faults.is_active("raw_input_amax"):
            t = t.float() / SCALE_DENOM
    if key.endswith(("mlp.experts.w13_weight", "mlp.experts.w13_weight_scale")) \
            and faults.is_active("gate_up_layout"):
        t = concat_to_interleaved(t, dim=1)
    return key, t


def _check_against_layout(fname: str, name: str, t: torch.Tensor, layout: dict) -> None:
    if name not in layout:
        raise CheckpointError(f"{fname}: unexpected tensor {name} (not in this config's layout)")
    shape, dtype = layout[name]
    if tuple(t.shape) != tuple(shape):
        raise CheckpointError(f"{fname}: {name} has shape {tuple(t.shape)}, the layout says {tuple(shape)}")
    if (dtype in _PACKED or t.dtype in _PACKED) and t.dtype != dtype:
        raise CheckpointError(f"{fname}: {name} is {t.dtype}, the layout says {dtype}")


def load_items(model: torch.nn.Module, items, config=None, module_prefix: str = "") -> LoadReport:
    """Load (file, native name, full tensor) items into model; config (default model.config) gives the layout.

    module_prefix (e.g. "layers.3.mlp.experts.") loads one submodule: only tensors under it are
    taken, with that prefix removed from their module paths; the others are ignored.
    """
    config = config if config is not None else getattr(model, "config", None)
    layout = native_shapes(config) if config is not None else None
    params = loadable(model)
    done: set[str] = set()
    report = LoadReport(faults=sorted(n for n in ("raw_input_amax", "gate_up_layout") if faults.is_active(n)))
    for fname, name, t in items:
        if name.startswith(SKIPPED_PREFIXES):
            report.skipped += 1
            continue
        if not name.startswith(PREFIX):
            raise CheckpointError(f"{fname}: unexpected tensor {name} (no {PREFIX} prefix)")
        if layout is not None:
            _check_against_layout(fname, name, t, layout)
        key, value = map_tensor(name, t)
        if not key.startswith(module_prefix):
            continue
        key = key[len(module_prefix):]
        if key not in params:
            raise CheckpointError(f"{fname}: {name} has no parameter {key} in the model")
        if key in done:
            raise CheckpointError(f"{fname}: {name} loaded twice")
        param = params[key]
        loader = getattr(param, "weight_loader", replicated_loader)  # replicated: exact full shape
        try:
            loader(param, value)
        except ValueError as err:
            raise CheckpointError(f"{fname}: {name} -> {key}: {err}") from None
        done.add(key)
        report.loaded += 1
    missing = sorted(set(params) - done)
    if missing:
        native = PREFIX + _native_key(module_prefix + missing[0])
        raise CheckpointError(f"checkpoint lacks {native} for parameter {missing[0]}"
                              f" ({len(missing)} parameters not loaded)")
    return report


def _native_key(key: str) -> str:
    return key[: -len("_input_scale")] + "_input_amax" if key.endswith("_input_scale") else key


def load_checkpoint(model: torch.nn.Module, ckpt_dir, config=None, module_prefix: str = "") -> LoadReport:
    """Load a native checkpoint dir (safetensors only, no pickles) into model's parameters."""
    return load_items(model, iter_tensors(ckpt_dir), config=config, module_prefix=module_prefix)


def load_tensors(model: torch.nn.Module, tensors: dict[str, torch.Tensor], config=None,
                 module_prefix: str = "") -> LoadReport:
    """The same for an in-memory {native name: tensor} dict."""
    items = (("<memory>", n, t) for n, t in tensors.items())
    return load_items(model, items, config=config, module_prefix=module_prefix)
