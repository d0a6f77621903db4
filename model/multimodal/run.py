"""``inkling-probe run --image/--audio``: media read and checked at start, placeholders expanded,
then a multimodal prefill followed by eager decode (inkling_model's ``generate``), or the same
steps through transformers' InklingForConditionalGeneration (``--impl hf``).

Spawned ranks import :func:`mm_native_rank`; every rank computes the (replicated) towers itself.
"""

from __future__ import annotations

import torch
from torch import nn

from .processor import MediaError, MediaInputs, expand_placeholders


def prepare(ckpt: str, prompts: list[list[int]], images: tuple, audios: tuple, limits=None):
    """(prompts with placeholders expanded, MediaInputs); MediaError / CheckpointError are one line.

    Every file's header is checked (:mod:`media_limits`: pixels, duration, channels, the memory
    budget, the prompt's tokens against ``max_position_embeddings``) before any file is decoded."""
    from .checkpoint import read_multimodal_config
    from .media_io import read_image, read_wav
    from .media_limits import MediaLimits

    config, mm = read_multimodal_config(ckpt)
    if len(prompts) != 1:
        raise MediaError(f"media go with one prompt, got {len(prompts)}: pass --tokens once")
    limits = limits or MediaLimits.from_env()
    check_headers(mm, config.max_position_embeddings, len(prompts[0]), images, audios, limits)
    media = MediaInputs.build(mm, [read_image(p, limits) for p in images],
                              [read_wav(p, mm.sampling_rate, limits) for p in audios])
    ids = expand_placeholders(prompts[0], mm, media)
    from .processor import media_layout

    media_layout(torch.tensor(ids), mm, media)  # the count check, before any rank starts
    return [ids], media


def check_headers(mm, max_positions: int, prompt_tokens: int, images, audios, limits) -> None:
    """Every item's header against ``limits``, then all their tokens against the model's positions."""
    from .media_header import image_header, wav_header
    from .media_limits import check_rate, check_tokens

    tokens = []
    for p in images:
        h = image_header(p)
        tokens.append((p, limits.check_image(p, h.width, h.height, h.channels, mm.vision.patch_size,
                                             mm.vision.temporal_patch_size)))
    for p in audios:
        h = wav_header(p)
        check_rate(p, h.rate, mm.sampling_rate)
        tokens.append((p, limits.check_audio(p, h.frames, h.channels, h.width, h.rate)))
    check_tokens(prompt_tokens, tokens, max_positions)


class MediaOnce(nn.Module):
    """The multimodal model, seen by ``generate`` as a text model: the first forward carries the media."""

    def __init__(self, model, media: MediaInputs):
        super().__init__()
        self.model, self.media, self.tp = model, media, model.tp

    def new_cache(self, *args, **kwargs):
        return self.model.new_cache(*args, **kwargs)

    def __getattr__(self, name: str):  # config, layers, dtype, ...: what a KV pool reads of a text model
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model.llm, name)

    def forward(self, ids, ctx=None, last_only: bool = False):
        media, self.media = self.media, None
        return self.model(ids, ctx, last_only, media=media)


def mm_native_rank(rank: int, world: int, ckpt: str, dtype: str, prompts: list[list[int]], max_new: int,
                   eos, dump: str | None, gen: dict, media: MediaInputs) -> dict:
    """One rank of a multimodal native run (prefill with media, then eager decode)."""
    import contextlib

    import inkling_probe
    from inkling_model import parallel
    from inkling_model.checkpoint.shards import CheckpointError
    from inkling_model.generate import generate
    from inkling_model.plugins.genlog import StepLog

    from .checkpoint import load_multimodal, read_multimodal_config
    from .model import InklingForConditionalGeneration

    config, mm = read_multimodal_config(ckpt)
    model = InklingForConditionalGeneration(config, mm, parallel.init(), _dtype(dtype))
    try:
        load_multimodal(model, ckpt)
    except CheckpointError as e:
        return {"error": str(e)}
    steps = StepLog(1)
    with inkling_probe.recording(dump) if dump else contextlib.nullcontext(), torch.no_grad():
        if max_new == 0:
            model(torch.tensor(prompts[0]), media=media)
            return {"responses": [{"id": 0, "tokens": [], "finish_reason": "prefill only", "steps": []}]}
        out = generate(MediaOnce(model, media), prompts, max_new, eos, on_step=steps,
                       **{k: gen[k] for k in ("temperature", "top_k", "seed")})
    return {"responses": [{"id": 0, "tokens": out[0].tokens, "finish_reason": out[0].finish_reason,
                           "steps": steps.of(0)}]}


def mm_hf_run(ckpt: str, dtype: str, ids: list[int], max_new: int, eos, dump: str, gen: dict,
              media: MediaInputs) -> dict:
    """transformers' InklingForConditionalGeneration with module capture: the same steps."""
    import inkling_probe
    from inkling_model.checkpoint.shards import CheckpointError
    from inkling_model.generate import _pick

    from .checkpoint import read_multimodal_config
    from .hf_reference import hf_inputs, load_hf_mm_model, step

    try:
        model = load_hf_mm_model(ckpt, _dtype(dtype))
        _, mm = read_multimodal_config(ckpt)
    except CheckpointError as e:
        return {"error": str(e)}
    g = torch.Generator().manual_seed(gen["seed"]) if gen["temperature"] else None
    tokens, reason, cache, kwargs = [], "length", None, hf_inputs(torch.tensor(ids), media)
    with inkling_probe.record(model, dump, name_map="hf_inkling"), torch.no_grad():
        for _ in range(max(max_new, 1)):
            step(mm, kwargs["input_ids"], media if "pixel_values" in kwargs or "audio_input_ids" in kwargs else None)
            out = model(**kwargs, cache=cache, use_cache=True)
            if max_new == 0:
                return {"tokens": [], "finish_reason": "prefill only"}
            cache = out.cache
            tok = int(_pick(out.logits[:, -1], gen["temperature"], gen["top_k"], g)[0])
            tokens.append(tok)
            if tok in eos.ids:
                reason = "eos" if tok == eos.end_id else "stop"
                break
            kwargs = {"input_ids": torch.tensor([[tok]])}
    return {"tokens": tokens, "finish_reason": reason}


def run_multimodal(impl, ckpt, tp, dtype, prompts, max_new, eos, dump, gen, media) -> list[dict]:
    """Every response (one request), or one ``{"error": ...}``."""
    if impl == "hf":
        out = mm_hf_run(ckpt, dtype, prompts[0], max_new, eos, dump, gen, media)
        return [out if "error" in out else {"id": 0, "steps": [], **out}]
    if tp == 1:
        results = [mm_native_rank(0, 1, ckpt, dtype, prompts, max_new, eos, dump, gen, media)]
    else:
        from inkling_model.parallel import spawn

        results = spawn(mm_native_rank, tp, ckpt, dtype, prompts, max_new, eos, dump, gen, media)
    errors = [r for r in results if "error" in r]
    return errors[:1] if errors else results[0]["responses"]


def _dtype(name: str):
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
