"""transformers families: build a tiny random model from a config, plant, record one forward.

Weights are made checkpoint-like before anything runs: norm weights drawn around 1 and biases
drawn around 0 (transformers initialises them to exactly 1 and 0, which would hide a norm weight
that is not loaded or a dropped bias), then every parameter is rounded to bf16, as a bf16
checkpoint would be, so the fp32 reference and the bf16 runs read the same weights.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from inkling_corpus.case import Run

SEED = 0
TOKENS = 24
BATCH = 4


@dataclass(frozen=True)
class Mod:
    """A change planted in a built model: a fault (with its truth) or a benign variant."""

    name: str
    plant: Callable  # plant(model) -> None: edits weights or registers hooks (before recording)
    truth: tuple = ()
    explain: tuple = ()
    config: dict = field(default_factory=dict, hash=False)  # config overrides for this run
    regimes: tuple = ("fp32", "bf16+ctl")
    step: int | None = None  # the step where the fault is born, when the runs have several
    note: str = ""
    quick: bool = False


@dataclass(frozen=True)
class Family:
    """One transformers architecture at a tiny size."""

    name: str
    make_config: Callable  # (**overrides) -> PretrainedConfig
    model_cls: Callable
    mods: dict = field(hash=False)  # name -> Mod (faults and benign plants)
    tokens: int = TOKENS  # prompt length (the long families' 512 tokens; max_position_embeddings must fit it)


def _checkpoint_like(model: torch.nn.Module) -> None:
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1 and "norm" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            p.copy_(p.to(torch.bfloat16).float())


def build(family: Family, run: Run) -> torch.nn.Module:
    """The family's model for ``run``: same weights for every run, in the run's dtype, mods planted."""
    overrides = {"attn_implementation": run.setting("attn", "eager")}
    mod = family.mods.get(run.fault) or family.mods.get(run.setting("mod", ""))
    if mod is not None:
        overrides.update(mod.config)
    config = family.make_config(**overrides)
    if run.setting("experts"):
        config._experts_implementation = run.setting("experts")
    torch.manual_seed(SEED)
    model = family.model_cls(config).eval()
    _checkpoint_like(model)
    model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[run.dtype])
    if mod is not None:
        mod.plant(model)
    return model


def prompt_ids(vocab: int, prompt: int, batch: int = 1, row: int = 0, tokens: int = TOKENS) -> torch.Tensor:
    """[batch, tokens] token ids; row ``row`` holds prompt ``prompt``, the others other prompts."""
    rows = []
    for b in range(batch):
        gen = torch.Generator().manual_seed(1000 + (prompt if b == row else 100 + 7 * b + prompt))
        rows.append(torch.randint(3, vocab, (tokens,), generator=gen))
    return torch.stack(rows)


@contextlib.contextmanager
def _threads(n: int):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def record(family: Family, run: Run, dump: str) -> None:
    """Build, plant and run the model once with every module's outputs and inputs recorded."""
    import inkling_probe

    batch, row = run.setting("batch", 1), run.setting("row", 0)
    sliced = batch > 1 and run.setting("slice", False)  # keep the row that holds the prompt
    with _threads(run.setting("threads", 1)):
        model = build(family, run)
        ids = prompt_ids(model.config.vocab_size, run.prompt, batch, row, family.tokens)
        with torch.no_grad(), inkling_probe.record(model, dump, writer="inline",  # honest token dims ("auto")
                                                   batch_row=row if sliced else None):
            _forward(model, ids, run.setting("decode", 0))


def _forward(model, ids: torch.Tensor, decode: int) -> None:
    """A prefill (step 0), then ``decode`` teacher-forced decode steps through the KV cache: the
    decode tokens are fixed (a later prompt's ids), so a fault cannot change what is fed."""
    import inkling_probe

    inkling_probe.step()
    out = model(input_ids=ids, use_cache=bool(decode))
    follow = prompt_ids(model.config.vocab_size, 50)[:, :decode].expand(ids.shape[0], -1)
    for i in range(decode):
        inkling_probe.step()
        out = model(input_ids=follow[:, i:i + 1], cache=out.cache, use_cache=True)


def record_all(family: Family, items) -> dict:
    """Record every ``(run, dump)`` pair of ``items`` in this process; returns {run: error} of
    the runs that raised (the others are recorded)."""
    failed = {}
    for run, dump in items:
        try:
            record(family, run, dump)
        except Exception as e:  # a broken case must not hide the others
            failed[run] = f"{type(e).__name__}: {e}"
    return failed
