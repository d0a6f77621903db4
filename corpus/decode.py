"""Decode through ``model.generate()`` (issue 41): record transformers families as a user decodes them.

Every run of a decode family generates ``NEW`` tokens from its family's prompt with a KV cache. The
reference (fp32, no fault, no variant) decodes greedily; every other run (candidate, control) is
teacher-forced to the reference's tokens (``compare.force_tokens``), so each decode step is fed the
same token and judged. One :func:`inkling_probe.step` a forward (a root pre-hook): step 0 is the
prefill, step k the k-th decode forward, which :attr:`Case.step` names. No token ends a run (no EOS):
each decodes exactly ``NEW`` tokens, ``NEW`` forwards.

A batch run (variant ``batch``, ``row``) decodes the reference's prompt as row ``row``; the other
rows hold other prompts ``PAD`` tokens shorter, left-padded, and decode greedily. The whole batch is
recorded; compare reads row ``row`` (``cand_row=``).
"""
from __future__ import annotations

import contextlib
import os

import torch

from inkling_corpus.case import Run
from inkling_corpus.hf import Family, _threads, build, prompt_ids

TOKENS = 64  # prompt length
NEW = 24  # tokens generated: the prefill and NEW - 1 decode forwards
PAD = 16  # the other rows of a batch run are this many tokens shorter (left-padded)
PAD_ID = 0  # prompts draw ids >= 3


def reference(run: Run) -> Run:
    """The greedy run every run of its prompt is forced to."""
    return Run(run.family, prompt=run.prompt)


def batch_prompts(vocab: int, run: Run, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, attention_mask)``, both ``[B, tokens]``: the run's prompt unpadded in row ``row``."""
    batch, row = run.setting("batch", 1), run.setting("row", 0)
    ids = prompt_ids(vocab, run.prompt, batch, row, tokens)  # [B, T]
    mask = torch.ones_like(ids)  # [B, T]
    others = [b for b in range(batch) if b != row]
    ids[others, :PAD] = PAD_ID
    mask[others, :PAD] = 0
    return ids, mask


class RowForced:
    """A :class:`ForcedTokens` applied to one row of a batch (the row holding the reference's prompt);
    ``ForcedTokens`` itself decodes one sequence. The other rows pick their own tokens."""

    def __init__(self, forced, row: int):
        self.forced, self.row = forced, row

    def __call__(self, input_ids, scores):  # [B, S], [B, V]
        r = slice(self.row, self.row + 1)
        out = scores.clone()
        out[r] = self.forced(input_ids[r], scores[r])
        return out


@contextlib.contextmanager
def _forced(model, run: Run, ref_dump: str | None):
    """The ``generate`` keyword arguments that force ``run`` to ``ref_dump``'s tokens (none: greedy)."""
    from inkling_probe.compare.force_tokens import ForcedTokens, force_tokens, reference_tokens

    if ref_dump is None:
        yield {}
    elif run.setting("batch", 1) == 1:
        with force_tokens(model, ref_dump):
            yield {}
    else:
        yield {"logits_processor": [RowForced(ForcedTokens(reference_tokens(ref_dump)), run.setting("row", 0))]}


def record(family: Family, run: Run, dump: str, ref_dump: str | None) -> None:
    """Build, plant and ``generate`` with every module recorded, one step a forward; forced to
    ``ref_dump``'s tokens unless None (the reference itself)."""
    import inkling_probe

    with _threads(run.setting("threads", 1)):
        model = build(family, run)
        model.generation_config.eos_token_id = None  # every run decodes NEW tokens
        model.generation_config.pad_token_id = PAD_ID
        ids, mask = batch_prompts(model.config.vocab_size, run, family.tokens)
        stepper = model.register_forward_pre_hook(lambda m, a: inkling_probe.step())  # before record's hooks
        try:
            with torch.no_grad(), _forced(model, run, ref_dump) as extra, \
                    inkling_probe.record(model, dump, writer="inline"):
                model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, **extra)
        finally:
            stepper.remove()


def record_all(family: Family, items) -> dict:
    """Record every ``(run, dump)`` of ``items``, references first (the others are forced to them;
    a reference not in ``items`` is read from, or recorded to, its dump beside the run's). Returns
    {run: error} of the runs that raised."""
    failed = {}
    for run, dump in sorted(items, key=lambda item: item[0] != reference(item[0])):
        ref = reference(run)
        try:
            ref_dump = None if run == ref else os.path.join(os.path.dirname(dump), ref.slug())
            if ref in failed:
                raise RuntimeError(f"its reference was not recorded: {failed[ref]}")
            if ref_dump is not None and not os.path.isdir(ref_dump):
                record(family, ref, ref_dump, None)
            record(family, run, dump, ref_dump)
        except Exception as e:  # a broken case must not hide the others
            failed[run] = f"{type(e).__name__}: {e}"
    return failed
