"""Teacher-forced decode: feed a candidate the tokens a reference dump decoded, step by step, so every
decode step stays aligned and compare judges it (docs/COMPARE.md section 4). The token decision
itself is kept: where the candidate's own choice differs, it is noted with its logits margin.

    from inkling_probe.compare.force_tokens import force_tokens
    with force_tokens(model, "ref_dump") as forced:       # model.generate emits the reference's tokens
        with inkling_probe.record(model, "cand_dump"):
            model.generate(ids, max_new_tokens=24, do_sample=False)
    forced.decisions                                      # [{"step", "forced", "own", "margin"}, ...]

The reference is a dump of one sequence (batch 1), recorded around a generate call or one forward a
step. Its forwards are its recorded (step, call) pairs in order (``record()`` around transformers'
generate: step 0, call n; ``inkling-probe run``: step n, call 0); forward 0 is the prefill. What each
forward was fed is read from its integer input ids (``in.input_ids``, the root's keyword input as
``record()`` names it; else ``embed.in.0``, ``*.embed_tokens.in.0``): the prompt is forward 0's ids,
the k-th decoded token forward k+1's. A dump without input ids (inkling_model's: the model records no
ids) gives its tokens as the argmax of each forward's last ``logits`` row: exact for a greedy
reference only. The last token (fed to no forward) is the argmax of the last forward's logits, kept
only where every fed token was its logits' argmax (a greedy reference). A forward missing in between
(a step filter) is an error, never a guess.

``ForcedTokens`` is the transformers LogitsProcessor (``model.generate(..., logits_processor=[f])``):
at the k-th pick it checks the sequence so far is the reference's prompt and first k tokens (a
different prompt is a ``ValueError``), notes the decision when the candidate's argmax differs (margin:
its top logit minus its logit for the forced token), and leaves only the forced token possible.
numpy only here; torch is the caller's model's.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from inkling_probe.settings import matches_any

IDS_KEYS = ("in.input_ids", "embed.in.0", "*.embed_tokens.in.0")  # the ids a forward was fed, first found wins
LOGITS_KEY = "logits"


@dataclass
class ReferenceTokens:
    """The reference's prompt and decoded tokens (module docstring says where they are read from)."""

    path: str
    prompt: list[int] | None  # forward 0's ids; None: the dump records no input ids
    tokens: list[int]  # the k-th decoded token (picked from forward k's logits)
    forwards: list[tuple[int, int]]  # (step, call) of each recorded forward, in order
    source: str  # where the tokens were read from, in words


def reference_tokens(ref_dump, *, ids_key: str | None = None, logits_key: str = LOGITS_KEY,
                     name_map=None) -> ReferenceTokens:
    """Read a reference dump's prompt and decoded tokens; ``ValueError`` (one line) when it can't."""
    from inkling_probe.compare.align import entries
    from inkling_probe.store.namemap import NameMap
    from inkling_probe.store.reader import as_dump

    dump = as_dump(ref_dump)
    ents = entries(dump, NameMap.load(name_map) if name_map is not None else None, "reference")
    key = ids_key or _ids_key(ents)
    fed = _by_forward(dump, ents, key) if key else {}
    logits = {f: e for (k, s, c), e in ents.items() for f in [(s, c)] if k == logits_key}
    forwards = sorted(fed or logits)
    where = f"{dump.path}"
    if not forwards:
        raise ValueError(f"{where}: no input ids ({', '.join(IDS_KEYS)}) and no {logits_key!r}: no tokens recorded")
    _check_consecutive(where, forwards)

    def argmax(f) -> int:
        return _argmax(where, dump, logits[f], f)

    if fed:
        tokens = [_one(where, fed[f], f, key) for f in forwards[1:]]
        greedy = all(f in logits and argmax(f) == t for f, t in zip(forwards, tokens))
        if greedy and forwards[-1] in logits:
            tokens.append(argmax(forwards[-1]))
        return ReferenceTokens(str(dump.path), [int(t) for t in fed[forwards[0]]], tokens, forwards,
                               f"the input ids each forward was fed ({key})")
    for f in forwards[1:]:
        if int(np.prod(logits[f].global_shape()[:-1])) != 1:
            raise ValueError(f"{where}: forward {f} decodes {logits[f].global_shape()} logits: one sequence only")
    return ReferenceTokens(str(dump.path), None, [argmax(f) for f in forwards], forwards,
                           f"the argmax of each forward's last {logits_key!r} row (a greedy reference)")


def _ids_key(ents) -> str | None:
    keys = {k for (k, s, c), e in ents.items() if e.dtype.startswith(("int", "uint"))}
    for pattern in IDS_KEYS:
        found = sorted(k for k in keys if matches_any(k, (pattern,)))
        if found:
            return found[0]
    return None


def _by_forward(dump, ents, key) -> dict:
    return {(s, c): np.asarray(dump.array(e.key, step=s, call=c)).reshape(-1)
            for (k, s, c), e in ents.items() if k == key}


def _check_consecutive(where: str, forwards: list) -> None:
    for (s0, c0), (s1, c1) in zip(forwards, forwards[1:]):
        if (s1, c1) not in ((s0, c0 + 1), (s0 + 1, 0)):
            raise ValueError(f"{where}: forwards jump from step {s0} call {c0} to step {s1} call {c1} (recorded with "
                             "a step filter?): the tokens in between are not known")


def _one(where: str, ids: np.ndarray, f, key: str) -> int:
    if ids.size != 1:
        raise ValueError(f"{where}: {key} at step {f[0]} call {f[1]} holds {ids.size} ids: one sequence decoding only")
    return int(ids[0])


def _argmax(where: str, dump, e, f) -> int:
    row = np.asarray(dump.array(e.key, step=e.step, call=e.call), dtype=np.float64)
    row = row.reshape(-1, row.shape[-1])[-1]
    if not np.isfinite(row).any():
        raise ValueError(f"{where}: logits at step {f[0]} call {f[1]} hold no finite value: its token is not known")
    return int(np.argmax(np.nan_to_num(row, nan=-np.inf)))


def decision(step: int, logits_row, forced: int, own: int | None = None) -> dict | None:
    """The candidate's own choice at ``step`` (``own``, default its argmax) where it differs from
    ``forced``: ``{"step", "forced", "own", "margin"}``, margin its top logit minus its logit for the
    forced token; else None. ``logits_row``: ``[V]`` numbers (numpy, or a host float tensor)."""
    row = np.nan_to_num(np.asarray(logits_row, dtype=np.float64).reshape(-1), nan=-np.inf)
    own = int(np.argmax(row)) if own is None else int(own)
    if own == forced:
        return None
    return {"step": step, "forced": int(forced), "own": own, "margin": float(row.max() - row[forced])}


class ForcedTokens:
    """A transformers LogitsProcessor that makes generate pick the reference's tokens (module docstring)."""

    def __init__(self, ref: ReferenceTokens):
        if ref.prompt is None:
            raise ValueError(f"force_tokens: {ref.path} records no input ids ({', '.join(IDS_KEYS)}); "
                             "its prompt can't be checked")
        self.ref = ref
        self.decisions: list[dict] = []  # the candidate's own choices where they differ (:func:`decision`)

    def __call__(self, input_ids, scores):
        seq = input_ids.tolist()
        if len(seq) != 1:
            raise ValueError(f"force_tokens: {len(seq)} sequences; the reference decodes one (batch 1, no beams)")
        seq, prompt = seq[0], self.ref.prompt
        n = len(prompt)
        if seq[:n] != prompt or seq[n:] != self.ref.tokens[:len(seq) - n]:
            raise ValueError(f"force_tokens: the sequence so far ({len(seq)} ids) is not {self.ref.path}'s prompt "
                             f"({n} ids) and decoded tokens: run its prompt")
        k = len(seq) - n
        if k >= len(self.ref.tokens):
            raise ValueError(f"force_tokens: {self.ref.path} decoded {len(self.ref.tokens)} tokens; generate "
                             f"asked for token {k + 1}")
        forced = self.ref.tokens[k]
        d = decision(k, scores[0].detach().float().cpu().numpy(), forced)
        if d is not None:
            self.decisions.append(d)
        out = scores.clone().fill_(-float("inf"))
        out[:, forced] = 0.0
        return out


@contextlib.contextmanager
def force_tokens(model, ref_dump, *, ids_key=None, logits_key=LOGITS_KEY, name_map=None):
    """``model.generate`` inside the block emits ``ref_dump``'s tokens (a :class:`ForcedTokens` added
    to its logits processors, after any the caller passes); yields it (``.decisions``). Restored on exit."""
    forced = ForcedTokens(reference_tokens(ref_dump, ids_key=ids_key, logits_key=logits_key, name_map=name_map))
    own = model.__dict__.get("generate")
    plain = type(model).generate

    def generate(*args, logits_processor=None, **kwargs):
        return plain(model, *args, logits_processor=[*(logits_processor or []), forced], **kwargs)

    model.generate = generate
    try:
        yield forced
    finally:
        if own is None:
            del model.generate
        else:
            model.generate = own
