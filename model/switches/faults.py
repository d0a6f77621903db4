"""Planted faults: known bugs, off by default, switched on by name to test the toolkit's hunt.

This registry is the one list: ``run --help``, docs/MODEL.md's table (generated from it, checked by
tests/model/test_faults.py), the ``bisect flags`` toggles and the tests read it. Adding a fault is an
entry here plus the ``is_active("name")`` check in the file that carries it (its ``carrier``, which a
test holds true).

Switch on with ``INKLING_FAULT=name[,name...]`` or one variable per fault, ``INKLING_FAULT_<NAME>=1``
(``INKLING_FAULT_RAW_INPUT_AMAX=1``: a toggle of its own for ``bisect flags``; read at every check, so
a spawned rank inherits it) or, in tests, ``with faults.activate("name"): ...``. Code that carries a fault asks
``faults.is_active("name")``. Each entry documents where the error is BORN, as the canonical probe
key a correct localization must name (:func:`location` gives it for a config).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, Iterable

from inkling_probe.settings import env_flag

ENV = "INKLING_FAULT"


@dataclass(frozen=True)
class Fault:
    """One planted bug: its name, the file that carries it (``path (part)``, the path from the repository
    root), what it reproduces (one line), the whole story, and its true location for a config."""

    name: str
    carrier: str
    reproduces: str
    doc: str
    locate: Callable[[object], str]

    @property
    def switch(self) -> str:
        """The variable that switches it on by itself (``INKLING_FAULT_RAW_INPUT_AMAX=1``)."""
        return switch_var(self.name)

    @property
    def carrier_file(self) -> str:
        return self.carrier.split(" (", 1)[0]


def _first_nvfp4_layer(config) -> int:
    for i in range(config.num_hidden_layers):
        if config.is_moe(i) and i >= config.quant_first_layer:
            return i
    raise ValueError("config has no MoE layer at or after quant_first_layer: no NVFP4 experts")


def _first_moe_layer(config) -> int:
    for i in range(config.num_hidden_layers):
        if config.is_moe(i):
            return i
    raise ValueError("config has no MoE layer")


def _first_dense_layer(config) -> int:
    for i in range(config.num_hidden_layers):
        if not config.is_moe(i):
            return i
    raise ValueError("config has no dense MLP layer")


RENORM_LAYER = 1
RENORM_ROWS = (2, 5)

FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("raw_input_amax", "model/checkpoint/weights.py (weight mapper)",
          "the checkpoint's raw `input_amax` taken as the NVFP4 input scale, without `/ (6*448)`",
          "The mapper renames the checkpoint's raw `input_amax` to input_scale without dividing by "
          "6 * 448: the activation global scale is 2688x too small and most NVFP4 blocks flush to zero. "
          "Born in the routed experts of the first NVFP4 layer (layers.3.mlp.experts for tiny, "
          "quant_first_layer 3).",
          lambda c: f"layers.{_first_nvfp4_layer(c)}.mlp.experts"),
    Fault("gate_up_layout", "model/checkpoint/weights.py (weight mapper)",
          "interleaved routed-expert w13 read as concatenated [gate; up]",
          "The mapper treats the interleaved routed-expert w13 ([g0, u0, g1, u1, ...]) as concatenated "
          "([gate; up]): gate and up rows are mixed. Born in the routed experts of the first MoE "
          "layer (layers.2.mlp.experts for tiny).",
          lambda c: f"layers.{_first_moe_layer(c)}.mlp.experts"),
    Fault("renorm_rows", "model/layers/decoder.py (decoder layer)",
          "token rows 2 and 5 of layer 1's attn_norm output normalised again with the norm weight "
          "(vision rows re-normalised in the text stream)",
          f"Token rows {list(RENORM_ROWS)} (of the forward's flattened tokens) of layer {RENORM_LAYER}'s "
          "attn_norm output are RMS-normalised a second time with the norm's weight (like vision rows "
          "re-normalised after being scattered into the text stream). Visible only where that norm "
          "weight is not all ones. Born at layers.1.attn_norm.",
          lambda c: f"layers.{RENORM_LAYER}.attn_norm"),
    Fault("capture_unsafe_allreduce", "model/allreduce.py (one-shot all-reduce, capture path)",
          "an all-reduce correct in eager mode, non-finite when replayed from a CUDA graph at one message size",
          "The one-shot all-reduce (INKLING_ALLREDUCE=oneshot, or auto when it picks oneshot) is not "
          "capture-safe for a message of exactly one token row (hidden x dtype bytes x 1 token): inside "
          "a captured CUDA graph it reduces its registered buffer without the input's copy into it. "
          "Eager is correct (prefill, eager decode); graph replay of a 1-token decode is non-finite. "
          "Born at the first all-reduce of a 1-request decode step: layers.0.attn.o_proj at TP=1 "
          "(embed at TP>1, where the embedding all-reduces first), step 1 (the first decode step).",
          lambda c: "layers.0.attn.o_proj"),
    Fault("adp_global_tp_size", "model/layers/attention.py (attention)",
          "an attention-DP shard that reads the global tp_size: the other heads of its output stay zero",
          "Under attention-DP the attention kernel is sized by the global tp_size (the world) instead of "
          "the attention group's: it computes only total_heads / world of this rank's heads and the "
          "output buffer's other heads stay zero. No effect without attention-DP. Born at the first "
          "layer's attention output before o_proj (layers.0.attn.out); q, k, v, r are intact.",
          lambda c: "layers.0.attn.out"),
    Fault("adp_dense_allreduce", "model/layers/mlp.py (dense MLP)",
          "an attention-DP dense MLP reducing over the world: other requests' partial sums added",
          "Under attention-DP the dense MLP reduces its partial sums over the world (rows padded to "
          "the longest group) instead of over the attention group: each token row gets the partial "
          "sums of other requests' rows added. No effect without attention-DP. Born at the first "
          "dense layer's MLP output (layers.0.mlp.out for tiny).",
          lambda c: f"layers.{_first_dense_layer(c)}.mlp.out"),
    Fault("no_config_eos", "model/generate.py (resolve_eos)",
          "end of sequence only in config.json, skipped: generation runs to the cap",
          "End-of-sequence resolution skips config.json (as in the bring-up, where the end id lived only "
          "there): with no explicit, tokenizer or generation_config.json id, generation runs to "
          "max_new_tokens, emitting the end id without stopping. No tensor differs; the location is the "
          "generation's finish (found by `inkling-probe health`: eos emitted but not honoured, runaway).",
          lambda c: "generate.resolve_eos"),
    Fault("renorm_fused_rows", "model/multimodal/fusion.py (fusion)",
          "image rows re-normalised after the scatter into the text stream (\"image not visible\")",
          "After the tower rows are scattered into the normed text embeddings, the image rows are "
          "RMS-normalised again (each row scaled to unit rms, no weight): the bring-up's \"image not "
          "visible\". Needs an image in the prompt. Born at the fused stream (fused), the towers clean.",
          lambda c: "fused"),
    Fault("vision_fold_order", "model/multimodal/vision.py (hMLP space-to-depth fold)",
          "the vision tower's space-to-depth fold in (w, h) order instead of (h, w)",
          "The vision tower's space-to-depth fold stacks each 2-D neighbourhood in (w, h) order instead "
          "of (h, w), so the projection weights meet transposed pixels. Needs an image. Born at the "
          "first hMLP layer (vision.layers.0), which folds space.",
          lambda c: "vision.layers.0"),
    Fault("audio_codebook_offsets", "model/multimodal/audio.py (audio tower)",
          "the audio tower's per-codebook offsets dropped: every mel bin reads codebook 0",
          "The audio tower drops the per-codebook offsets (bin b's level l must read table row "
          "b * mel_vocab_size + l): every mel bin reads codebook 0. Needs audio. Born at the summed "
          "codebook embeddings (audio.embed).",
          lambda c: "audio.embed"),
    Fault("fake_kernel_dtype", "model/layers/mlp.py (dense MLP; the custom op silu_fp32 in compile_faults.py)",
          "compile-only: a custom op whose fake kernel disagrees with its real one about the output dtype",
          "Compile-only. The first dense MLP's silu goes through a custom op whose real kernel returns fp32 "
          "while its fake kernel says the input's dtype; the MLP copies the result into a buffer of its "
          "dtype. Eager (and aot_eager) cast in the copy; Inductor plans buffers from the fake kernel and "
          "reads the fp32 result as bf16. bf16 and Inductor only. Born at layers.0.mlp.out for tiny.",
          lambda c: f"layers.{_first_dense_layer(c)}.mlp.out"),
    Fault("compiled_branch", "model/layers/decoder.py (layer 0's attn_norm; compile_faults.py)",
          "compile-only: a torch.compiler.is_compiling() fast path with a bug (an RMS sum, not a mean)",
          "Compile-only. Layer 0's attn_norm takes a \"compiled fast path\" when "
          "torch.compiler.is_compiling(), and that path takes the RMS statistic as a sum, not a mean. "
          "Eager runs the other branch; any backend (eager included) traces this one. Born at "
          "layers.0.attn_norm.",
          lambda c: "layers.0.attn_norm"),
    Fault("fusion_rounding", "model/layers/decoder.py (layer 0's mlp_norm; compile_faults.py)",
          "compile-only: rounding by bf16 magic numbers that Inductor's fp32 fusion skips",
          "Compile-only. Layer 0's mlp_norm output is snapped to a grid of 1/4 by magic-number rounding, "
          "(x*4 + 192) - 192, which relies on the sum being rounded to bf16. Inductor fuses it in fp32 and "
          "nothing is rounded (torch._inductor.config.emulate_precision_casts=True restores eager's "
          "rounding). bf16 and Inductor only. Born at layers.0.mlp_norm.",
          lambda c: "layers.0.mlp_norm"),
)}

_context: list[frozenset[str]] = []


def _check(names: Iterable[str]) -> frozenset[str]:
    names = frozenset(n.strip() for n in names if n.strip())
    unknown = sorted(names - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown fault {unknown[0]!r} (known: {', '.join(FAULTS)})")
    return names


def switch_var(name: str) -> str:
    """The variable that switches fault ``name`` on by itself (``INKLING_FAULT_RAW_INPUT_AMAX``)."""
    return f"{ENV}_{name.upper()}"


def from_env(environ=None) -> frozenset[str]:
    """The faults named in ``INKLING_FAULT`` (comma-separated) or switched on by ``INKLING_FAULT_<NAME>=1``."""
    env = environ if environ is not None else os.environ
    return _check(env.get(ENV, "").split(",") + [n for n in FAULTS if env_flag(switch_var(n), env)])


def active() -> frozenset[str]:
    """All faults switched on now (environment and :func:`activate` blocks)."""
    names = from_env()
    for ctx in _context:
        names |= ctx
    return names


def is_active(name: str) -> bool:
    """True when the fault ``name`` is switched on; an unknown name raises ValueError."""
    _check([name])
    return name in active()


@contextlib.contextmanager
def activate(names: str | Iterable[str]):
    """Switch faults on inside the block (a name, a comma-separated string or an iterable)."""
    names = _check(names.split(",") if isinstance(names, str) else names)
    _context.append(names)
    try:
        yield names
    finally:
        _context.remove(names)


def location(name: str, config) -> str:
    """The canonical probe key where fault ``name`` is born for ``config``."""
    _check([name])
    return FAULTS[name].locate(config)
