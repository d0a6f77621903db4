"""Teacher-forced decode: every decode step is fed the token a reference dump decoded there
(``run --force-tokens``), whatever the candidate's own logits say.

A candidate that decodes another token than the reference (a bf16 near-tie, or a fault) would feed
it to the next step, and compare could only set that step aside; a fault that lives only in decode
would hide there. Forced, every step runs the reference's tokens and stays judged. The candidate's
logits are its own (recorded as they are); where its own choice (the argmax) differs from the forced
token, that is a decision, kept with its margin (its top logit minus its logit for the forced token)
in :attr:`ForcedTokens.decisions`; ``run`` prints them and writes them into the gen-log, never as an
error.

The reference's prompt and tokens are read by :func:`inkling_probe.compare.force_tokens.reference_tokens`:
the input ids each forward was fed where the dump records them (a transformers dump: ``in.input_ids``,
``embed.in.0``), else (inkling_model records no ids) the argmax of each step's last ``logits`` row,
which is the token a greedy reference decoded. The reference's ``embed`` rows then check what the
ids cannot (:meth:`ForcedTokens.check_embedding`): each row is the candidate's embedding of the
token it says was fed, up to rounding (another token is a whole row off,
:data:`inkling_probe.compare.steps.OTHER_TOKEN`); a different prompt or a sampled reference is an
error. One request (batch 1). Switched on with ``INKLING_FORCE_TOKENS=<dump>`` (spawned ranks
inherit it); read once per process; :func:`inkling_model.generate.generation_loop`, the one
generation loop, consults it, so the plain decode, the runtime and its CUDA graphs (the token is
chosen on the host, before it is copied into the graph's static input) are all forced alike.
"""
from __future__ import annotations

import os

import numpy as np

ENV = "INKLING_FORCE_TOKENS"
EMBED = "embed"  # the canonical key of the normed embedding rows (what each step was fed)


class ForcedTokens:
    """The reference's prompt and tokens, and the candidate's decisions against them."""

    def __init__(self, path: str):
        from inkling_probe.compare.force_tokens import reference_tokens

        self.path = path
        self.ref = reference_tokens(path)
        self.decisions: list[dict] = []  # the candidate's own picks where they differ (compare.force_tokens.decision)
        self._dump = None

    @property
    def tokens(self) -> list[int]:
        return self.ref.tokens

    def check_prompt(self, prompt: list[int]) -> None:
        """``ValueError`` unless ``prompt`` is the reference's (its ids; without ids, its length)."""
        if self.ref.prompt is not None:
            if list(prompt) != self.ref.prompt:
                i = next((i for i, (a, b) in enumerate(zip(prompt, self.ref.prompt)) if a != b),
                         min(len(prompt), len(self.ref.prompt)))
                raise ValueError(f"the prompt differs from {self.path}'s at token {i} ({len(prompt)} ids, the "
                                 f"reference's {len(self.ref.prompt)})")
            return
        rows = self._embed_rows(self.ref.forwards[0])
        if rows is None:
            raise ValueError(f"{self.path} records no input ids and no {EMBED!r}: its prompt can't be checked")
        if rows.shape[0] != len(prompt):
            raise ValueError(f"the prompt differs from {self.path}'s: {len(prompt)} ids, the reference's "
                             f"{rows.shape[0]}")

    def check_length(self, max_new_tokens: int, eos_ids) -> None:
        """``ValueError`` when the reference decoded fewer tokens than asked (and did not end on an end id)."""
        have = len(self.ref.tokens)
        if max_new_tokens > have and not set(self.ref.tokens) & set(eos_ids):
            raise ValueError(f"{self.path} decoded {have} tokens ({len(self.ref.forwards)} steps); "
                             f"--max-new-tokens {max_new_tokens} asks for more")

    def check_embedding(self, prompt: list[int], max_new_tokens: int, embed) -> None:
        """``ValueError`` unless the reference's recorded ``embed`` rows are ``embed(ids) -> [n, H]``
        (numpy; the candidate's embedding) of the prompt and of the tokens fed to its decode steps."""
        from inkling_probe.compare.steps import OTHER_TOKEN

        fed = [list(prompt)] + [[t] for t in self.ref.tokens[:max(max_new_tokens - 1, 0)]]
        for n, (forward, ids) in enumerate(zip(self.ref.forwards, fed)):
            rows = self._embed_rows(forward)
            if rows is None or rows.shape[0] != len(ids):
                continue
            mine = np.asarray(embed(ids), dtype=np.float64).reshape(len(ids), -1)
            err = np.linalg.norm(mine - rows, axis=1) / np.maximum(np.linalg.norm(rows, axis=1), 1e-30)
            bad = np.flatnonzero(err > OTHER_TOKEN)
            if bad.size and n == 0:
                raise ValueError(f"the prompt differs from {self.path}'s at token {int(bad[0])} (its {EMBED!r} row "
                                 f"is another token's embedding: rel {err[bad[0]]:.2g})")
            if bad.size:
                raise ValueError(f"{self.path} step {forward[0]} was fed another token than {ids[0]} ({self.ref.source}"
                                 f"; its {EMBED!r} row is off by rel {err[bad[0]]:.2g}): a sampled reference? "
                                 "record it greedy (--temperature 0), or with its input ids (--impl hf)")

    def _embed_rows(self, forward) -> np.ndarray | None:
        """The reference's ``embed`` rows ``[n, H]`` at ``forward`` (step, call); None where not recorded."""
        from inkling_probe.errors import KeyNotFound
        from inkling_probe.store.reader import as_dump

        self._dump = self._dump or as_dump(self.path)
        try:
            a = np.asarray(self._dump.array(EMBED, step=forward[0], call=forward[1]), dtype=np.float64)
        except KeyNotFound:
            return None
        return a.reshape(-1, a.shape[-1])

    def take(self, request: int, k: int, logits, own: int) -> int:
        """The token request ``request`` is fed as its ``k``-th (the reference's), noting the candidate's
        ``own`` pick from ``logits [V]`` (a tensor) where it differs."""
        from inkling_probe.compare.force_tokens import decision

        if request != 0:
            raise ValueError(f"{ENV}: forces one request; request {request} has no reference tokens")
        if k >= len(self.ref.tokens):
            raise ValueError(f"{ENV}={self.path}: the reference decoded {len(self.ref.tokens)} tokens; "
                             f"token {k + 1} was asked for")
        forced = self.ref.tokens[k]
        if own != forced:
            self.decisions.append(decision(k, logits.float().cpu().numpy(), forced, own))
        return forced


_active: dict = {}


def active() -> ForcedTokens | None:
    """The process's forced tokens (from ``INKLING_FORCE_TOKENS``), or None."""
    path = os.environ.get(ENV, "")
    if not path:
        return None
    if _active.get("path") != path:
        _active.update(path=path, tokens=ForcedTokens(path))
    return _active["tokens"]


def reset() -> None:
    """Forget the loaded reference and its decisions (a new run in the same process starts afresh)."""
    _active.clear()
