"""Alignment of two dumps: which tensors pair up, in the reference's execution order.

Keys pair up after a name map (the same map is applied to both sides' keys), then by step and by
call (the n-th call of a key within a step). Keys, steps or calls present on one side only are
listed, never dropped silently. Tensor shapes are matched later, at load (:mod:`.conform`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from inkling_probe.errors import DumpError


@dataclass
class Entry:
    """One recorded tensor of one dump (all its ranks' index rows)."""

    key: str  # the key as recorded
    step: int
    call: int
    rows: list[dict]

    @property
    def first(self) -> dict:
        return self.rows[0]

    @property
    def seq(self) -> int:
        return self.first["seq"]

    @property
    def dtype(self) -> str:
        return self.first["dtype"]

    def global_shape(self) -> tuple[int, ...]:
        """The reassembled shape (concat shards add up along their dim)."""
        shape = list(self.first["shape"])
        if self.first["shard"] == "concat" and len(self.rows) > 1 and shape:
            dim = self.first["dim"]
            shape[dim] = sum(r["shape"][dim] for r in self.rows)
        return tuple(shape)


@dataclass
class Pair:
    """A reference tensor and its candidate under one (mapped) key."""

    key: str
    step: int
    call: int
    ref: Entry
    cand: Entry | None  # None: the reference has it, the candidate not


@dataclass
class Alignment:
    pairs: list[Pair]  # every reference tensor, in the reference's execution order
    only_ref: list[tuple[str, int]] = field(default_factory=list)  # (key, step) missing in the candidate
    only_cand: list[tuple[str, int]] = field(default_factory=list)  # (key, step) missing in the reference
    cand_entries: dict = field(default_factory=dict)  # (key, step, call) -> Entry of the candidate


def entries(dump, name_map=None, label: str = "dump") -> dict[tuple[str, int, int], Entry]:
    """Every tensor of ``dump`` by (mapped key, step, call), in execution order.

    Two recorded keys that a name map sends to one key are an error: they can't both be compared.
    """
    out: dict[tuple[str, int, int], Entry] = {}
    origin: dict[str, str] = {}
    for row in dump.index:  # sorted by (step, seq, rank)
        key = name_map.apply(row["key"]) if name_map is not None else row["key"]
        if key is None:
            continue
        if origin.setdefault(key, row["key"]) != row["key"]:
            raise DumpError(f"{dump.path}: {label} keys {origin[key]!r} and {row['key']!r} both map to {key!r}")
        ident = (key, row["step"], row["call"])
        if ident in out:
            out[ident].rows.append(row)
        else:
            out[ident] = Entry(row["key"], row["step"], row["call"], [row])
    return out


def align(ref_entries: dict, cand_entries: dict) -> Alignment:
    """Pair the reference's tensors with the candidate's, in the reference's execution order."""
    pairs = [Pair(key, step, call, e, cand_entries.get((key, step, call)))
             for (key, step, call), e in sorted(ref_entries.items(), key=lambda kv: (kv[0][1], kv[1].seq, kv[0][2]))]
    ref_seq, cand_seq = _first_seqs(ref_entries), _first_seqs(cand_entries)
    only_ref = sorted({(p.key, p.step) for p in pairs if p.cand is None}, key=lambda ks: (ks[1], ref_seq[ks]))
    extra = {(k, s) for (k, s, c) in cand_entries if (k, s, c) not in ref_entries}  # keys, steps or calls
    only_cand = sorted(extra, key=lambda ks: (ks[1], cand_seq[ks]))
    return Alignment(pairs, only_ref, only_cand, cand_entries)


def _first_seqs(entries_: dict) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for (key, step, _call), e in entries_.items():
        out[(key, step)] = min(out.get((key, step), e.seq), e.seq)
    return out


INDEX_OF = ("in", "out")  # a number after these is an input/output index, never a layer (``lm_head.in.0``)
CONTAINERS = ("layers", "layer", "h", "blocks", "block", "blk")  # ``model.layers.3``: a layer's own output


def layer_of(key: str) -> int | None:
    """The layer number of a dotted key: its first all-digit component (``layers.3.attn.q`` -> 3),
    except an input/output index (``lm_head.in.0``, ``norm.out.1``) and a last component that is a
    module's tuple output (``model.rotary_emb.0``) rather than a layer container's entry."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not part.isdigit():
            continue
        before = parts[i - 1] if i else ""
        if before in INDEX_OF:
            continue
        if i == len(parts) - 1 and before not in CONTAINERS:
            continue
        return int(part)
    return None
