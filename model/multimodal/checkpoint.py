"""Tower tensors of a native multimodal checkpoint: layout, random values, loading, writing.

Native names (transformers' conversion mapping "inkling_mm_model" reads them):

    model.visual.layers.linear_<i>.weight   [out_i, in_i]   (hMLP projection i, no bias)
    model.visual.layers.norm_<i>.weight     [out_i]         (all layers but the last)
    model.visual.final_norm.weight          [D]
    model.audio.encoder.weight              [n_mel_bins * mel_vocab_size, D]
    model.audio.final_norm.weight           [D]

All bf16 (also in NVFP4 checkpoints). The random vision ``final_norm`` weight is ~2 (a trained
tower's output scale is not the text embedding's), so a re-norm of the image rows is visible.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from inkling_model.checkpoint.shards import CheckpointError, iter_tensors
from inkling_model.checkpoint.synthetic import _tensor_seed

from .config import MultimodalConfig
from .vision import VisionTower

VISUAL, AUDIO = "model.visual.", "model.audio."


def tower_shapes(mm: MultimodalConfig) -> dict[str, tuple[tuple, torch.dtype]]:
    """Every tower tensor: native name -> (shape, dtype)."""
    with torch.device("meta"):
        vt = VisionTower(mm.vision)
    out = {}
    for i, layer in enumerate(vt.layers):
        out[f"{VISUAL}layers.linear_{i}.weight"] = (tuple(layer.weight.shape), torch.bfloat16)
        if layer.norm is not None:
            out[f"{VISUAL}layers.norm_{i}.weight"] = (tuple(layer.norm.weight.shape), torch.bfloat16)
    d = mm.vision.text_hidden_size
    out[f"{VISUAL}final_norm.weight"] = ((d,), torch.bfloat16)
    out[f"{AUDIO}encoder.weight"] = ((mm.audio.n_mel_bins * mm.audio.mel_vocab_size, d), torch.bfloat16)
    out[f"{AUDIO}final_norm.weight"] = ((d,), torch.bfloat16)
    return out


def random_tower_tensors(mm: MultimodalConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random bf16 tower tensors for (mm, seed)."""
    out = {}
    for name, (shape, dtype) in tower_shapes(mm).items():
        gen = torch.Generator().manual_seed(_tensor_seed(seed, name))
        r = torch.randn(shape, generator=gen)
        if name == f"{VISUAL}final_norm.weight":
            t = 2.0 * (1.0 + 0.1 * r)
        elif name.endswith("norm.weight") or "norm_" in name:
            t = 1.0 + 0.1 * r
        elif name == f"{AUDIO}encoder.weight":
            t = r
        else:
            t = r / math.sqrt(shape[-1])
        out[name] = t.to(dtype)
    return out


def module_path(name: str) -> str:
    """Native tower name -> the multimodal model's parameter path."""
    if name.startswith(VISUAL + "layers.linear_"):
        return f"visual.layers.{name[len(VISUAL + 'layers.linear_'):].split('.')[0]}.weight"
    if name.startswith(VISUAL + "layers.norm_"):
        return f"visual.layers.{name[len(VISUAL + 'layers.norm_'):].split('.')[0]}.norm.weight"
    table = {f"{VISUAL}final_norm.weight": "visual.final_norm.weight",
             f"{AUDIO}encoder.weight": "audio.weight", f"{AUDIO}final_norm.weight": "audio.norm.weight"}
    if name not in table:
        raise KeyError(name)
    return table[name]


def load_tower_items(model, items) -> int:
    """Load (file, native name, tensor) tower items into ``model.visual`` / ``model.audio``; every
    tower parameter exactly once (one-line CheckpointError otherwise). Returns the count."""
    layout = tower_shapes(model.mm)
    params = {n: p for n, p in model.named_parameters() if n.startswith(("visual.", "audio."))}
    done = set()
    for fname, name, t in items:
        if not name.startswith((VISUAL, AUDIO)):
            continue
        if name not in layout:
            raise CheckpointError(f"{fname}: unexpected tensor {name} (not in this config's tower layout)")
        if tuple(t.shape) != layout[name][0]:
            raise CheckpointError(f"{fname}: {name} has shape {tuple(t.shape)}, the layout says {layout[name][0]}")
        key = module_path(name)
        with torch.no_grad():
            params[key].copy_(t.to(params[key].dtype))
        done.add(key)
    missing = sorted(set(params) - done)
    if missing:
        raise CheckpointError(f"checkpoint lacks tower tensors for {missing[0]} ({len(missing)} not loaded)")
    return len(done)


def load_multimodal(model, ckpt_dir) -> None:
    """Load a native multimodal checkpoint into an InklingForConditionalGeneration."""
    from inkling_model.checkpoint.weights import load_checkpoint

    load_checkpoint(model.llm, ckpt_dir, config=model.config)
    load_tower_items(model, iter_tensors(ckpt_dir))


def load_multimodal_tensors(model, tensors: dict[str, torch.Tensor]) -> None:
    """The same for an in-memory {native name: tensor} dict."""
    from inkling_model.checkpoint.weights import load_tensors

    load_tensors(model.llm, tensors, config=model.config)
    load_tower_items(model, (("<memory>", n, t) for n, t in tensors.items()))


def write_multimodal_checkpoint(config, mm: MultimodalConfig, out_dir, seed: int = 0, quant=None,
                                progress=None) -> Path:
    """A random native checkpoint with towers: the text checkpoint of (config, seed, quant) plus the
    bf16 towers, config.json in transformers' nested multimodal form."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    mm.check(config)
    out = write_random_checkpoint(config, out_dir, seed=seed, quant=quant, progress=progress,
                                  extra_tensors=random_tower_tensors(mm, seed))
    text = json.loads((out / "config.json").read_text())
    from inkling_model.config import InklingConfig

    mm.save(InklingConfig.from_dict(text), out)
    return out


def read_multimodal_config(ckpt_dir):
    """(text config, towers config) of a checkpoint dir; CheckpointError when it has no towers."""
    from inkling_model.config import InklingConfig

    mm = MultimodalConfig.from_pretrained(ckpt_dir)
    if mm is None:
        raise CheckpointError(f"{Path(ckpt_dir) / 'config.json'}: no vision_config/audio_config (a text-only checkpoint)")
    _check_preprocessor(Path(ckpt_dir) / "preprocessor_config.json", mm)
    return InklingConfig.from_pretrained(ckpt_dir), mm


def _image_processor_does(mm: MultimodalConfig) -> dict:
    """What inkling_model's image processor does (processor.image_patches), as transformers'
    InklingImageProcessor config keys; a key left out of a config means transformers' default: this."""
    from inkling_model.multimodal.processor import CLIP_MEAN, CLIP_STD

    does = {"rescale_image_frac": None, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD), "do_convert_rgb": True}
    if mm.vision is not None:
        does["size"] = {"height": mm.vision.patch_size, "width": mm.vision.patch_size}
    return does


def _same(a, b) -> bool:
    """JSON values equal, numbers to float32 precision (a config writes 1/255 and CLIP's constants rounded)."""
    if isinstance(a, dict) and isinstance(b, dict):  # unset (null) fields of a size dict say nothing
        a, b = ({k: v for k, v in d.items() if v is not None} for d in (a, b))
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-6 * max(abs(a), abs(b))
    return a == b


def _check_preprocessor(path: Path, mm: MultimodalConfig) -> None:
    """A transformers image-processor config asking for what ours does not do is refused, not ignored:
    a resize before patching (``rescale_image_frac``), another mean/std, rescale, RGB conversion or
    patch size would make other pixels than transformers'."""
    if not path.is_file():
        return
    try:
        pre = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(pre, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    for key, ours in _image_processor_does(mm).items():
        if key in pre and not (key == "do_convert_rgb" and pre[key] is None) and not _same(pre[key], ours):
            raise CheckpointError(f"{path}: {key} {pre[key]!r} is not supported (inkling_model's image processor "
                                  f"does {ours!r}, transformers' default)")
