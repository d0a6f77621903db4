"""A name map read as a foreign dump's layout: each recorded key's canonical name, how its ranks'
shards combine, its token dim, and fused tensors split back into their parts.

A rule of a name map (store/namemap.py) may carry, besides ``match`` and ``to``:

    shard = "concat"            # "concat" (with dim), "partial" (sum) or "replicated"
    dim = -1                    # the concat dim
    token_dim = 0               # the token dim (-1: none; "auto"); default: [foreign] token_dim
    shift = -1                  # added to group 1 (a layer number) before expanding ``to``
    split = { dim = -1, parts = ["q_proj", "k_proj", "v_proj"], ratio = ["q_heads", "kv_heads", "kv_heads"] }
    # or: split = { dim = 1, parts = ["gate", "up"], interleave = true }   (rows g0, u0, g1, u1, ...)

With ``split``, ``to`` holds ``{part}``, replaced by each part's name. Each rank's shard is split
by itself (a fused projection shards each part, so rank r holds [q_r | k_r | v_r]); the parts'
shards then combine across ranks by ``shard``/``dim``. ``ratio`` entries are numbers or names of
``[foreign.params]`` (overridable per dump: the sizes are the model's, not the engine's).

    [foreign]
    token_dim = 0               # engines run token-major: [tokens, ...]; default "auto"
    params = { q_heads = 64, kv_heads = 8 }

``token_dim = "auto"`` (the default) finds each tensor's token dim as our module hooks do
(hooks.py): from the root module's recorded ``[B, T]`` integer input (``in.input_ids``, ``in.0``,
or SGLang's dumper's core field ``input_ids``),
``[B, T, ...]`` -> 1, ``[B, heads, T, ...]`` -> 2, ``[B*T, ...]`` -> 0, else none; without such an
input, none.

Our own dumps carry all this in their index; these keys are read for foreign dumps only.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from inkling_probe.errors import DumpError, SettingsError
from inkling_probe.store.namemap import FOREIGN_RULE_KEYS

SHARDS = ("concat", "partial", "replicated")
_RULE_KEYS = FOREIGN_RULE_KEYS
AUTO = "auto"
_GROUP_REF = re.compile(r"\\(\d+)|\\g<(\d+)>")


@dataclass(frozen=True)
class Part:
    """A slice of one rank's shard: part ``index`` of ``len(ratio)`` along ``dim``."""

    dim: int
    index: int
    ratio: tuple  # one weight per part (ignored when interleaved)
    interleave: bool = False


@dataclass(frozen=True)
class View:
    """One key a recorded tensor reads as."""

    key: str
    shard: str | None  # None: not declared
    dim: int | None
    token_dim: int | str | None  # AUTO: found from the dump's root input (ForeignDump)
    part: Part | None = None
    decision: bool = False


class Layout:
    """A name map (or none) applied to foreign keys: :meth:`views` per recorded key."""

    def __init__(self, name_map=None, params: dict | None = None, token_dim=None):
        self.map = name_map
        foreign = dict(getattr(name_map, "foreign", None) or {})
        unknown = set(foreign) - {"token_dim", "params"}
        if unknown:
            raise SettingsError(f"{self._source()}: [foreign] has unknown key {sorted(unknown)[0]!r}")
        given = token_dim if token_dim is not None else foreign.get("token_dim", AUTO)
        self.token_dim = _token_dim(given, self._source(), "[foreign]")
        self.params = {**dict(foreign.get("params", {})), **(params or {})}
        for k, v in self.params.items():
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise SettingsError(f"{self._source()}: param {k!r} = {v!r}: must be a positive integer")
        self.decisions = list(getattr(name_map, "decisions", None) or [])
        for i, rule in enumerate(getattr(name_map, "rules", None) or []):
            self._check_rule(i, rule)
        self._cache: dict[str, list[View]] = {}

    def _source(self) -> str:
        return getattr(self.map, "source", "<no map>")

    def _check_rule(self, i: int, rule) -> None:
        extra = getattr(rule, "extra", {}) or {}
        where = f"{self._source()}: rule {i + 1} ({rule.pattern.pattern!r})"
        unknown = set(extra) - _RULE_KEYS
        if unknown:
            raise SettingsError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        if "shift" in extra and (not isinstance(extra["shift"], int) or isinstance(extra["shift"], bool)):
            raise SettingsError(f"{where}: shift must be an integer (added to group 1, a layer number)")
        if "shard" in extra and extra["shard"] not in SHARDS:
            raise SettingsError(f"{where}: shard {extra['shard']!r} is not one of {', '.join(SHARDS)}")
        if extra.get("shard") == "concat" and not isinstance(extra.get("dim"), int):
            raise SettingsError(f"{where}: shard 'concat' needs an integer dim")
        split = extra.get("split")
        if split is not None:
            if not isinstance(split, dict) or not isinstance(split.get("dim"), int) or \
                    not isinstance(split.get("parts"), list) or len(split["parts"]) < 2 or "{part}" not in rule.to:
                raise SettingsError(f"{where}: split needs an integer dim, two or more parts and '{{part}}' in 'to'")
            if not split.get("interleave"):
                ratio = split.get("ratio", [1] * len(split["parts"]))
                if not isinstance(ratio, list) or len(ratio) != len(split["parts"]):
                    raise SettingsError(f"{where}: split ratio needs one entry per part")
                self._ratio(ratio, where)

    def _ratio(self, ratio: list, where: str) -> tuple:
        out = []
        for r in ratio:
            v = self.params.get(r) if isinstance(r, str) else r
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise SettingsError(f"{where}: split ratio entry {r!r} is not a positive integer or a known param "
                                    f"(params: {sorted(self.params)})")
            out.append(v)
        return tuple(out)

    def views(self, key: str) -> list[View]:
        """The keys ``key`` reads as (none: dropped by the map)."""
        if key not in self._cache:
            self._cache[key] = self._views(key)
        return self._cache[key]

    def _views(self, key: str) -> list[View]:
        if self.map is None:
            return [View(key, None, None, self.token_dim)]
        for i, rule in enumerate(self.map.rules):
            m = rule.pattern.fullmatch(key)
            if m:
                return self._from_rule(i, rule, m)
        if self.map.drop_unmatched:
            return []
        return [View(key, None, None, self.token_dim, None, self._decision(key))]

    def _from_rule(self, i: int, rule, m: re.Match) -> list[View]:
        extra = getattr(rule, "extra", {}) or {}
        where = f"{self._source()}: rule {i + 1}"
        shard, dim = extra.get("shard"), extra.get("dim")
        token_dim = _token_dim(extra["token_dim"], self._source(), f"rule {i + 1}") if "token_dim" in extra \
            else self.token_dim
        split = extra.get("split")
        names = split["parts"] if split else [None]
        out = []
        for index, part_name in enumerate(names):
            template = rule.to.replace("{part}", str(part_name)) if split else rule.to
            key = _expand(m, template, extra.get("shift", 0), where)
            if not key:
                continue
            part = None
            if split:
                interleave = bool(split.get("interleave"))
                ratio = (1,) * len(names) if interleave else self._ratio(split.get("ratio", [1] * len(names)), where)
                part = Part(split["dim"], index, ratio, interleave)
            out.append(View(key, shard, dim, token_dim, part, self._decision(key)))
        return out

    def _decision(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, g) for g in self.decisions)


def _expand(m: re.Match, template: str, shift: int, where: str) -> str:
    """``m.expand(template)``; with ``shift``, group 1 (a number: the layer) is shifted by it first
    (an engine that adds layer N's residual inside layer N+1's norm records it there)."""
    if not shift:
        try:
            return m.expand(template)
        except (re.error, IndexError) as e:
            raise SettingsError(f"{where} -> {template!r}: {e}") from None
    groups = list(m.groups())
    if not groups or groups[0] is None or not groups[0].isdigit():
        raise SettingsError(f"{where}: shift needs group 1 to be a number (got {groups[:1]})")
    groups[0] = str(int(groups[0]) + shift)
    if int(groups[0]) < 0:
        return ""  # before the first layer: nothing to name

    def ref(g: re.Match) -> str:
        i = int(g.group(1) or g.group(2))
        if not 0 < i <= len(groups):
            raise SettingsError(f"{where}: template {template!r} names group {i}")
        return groups[i - 1] or ""
    return _GROUP_REF.sub(ref, template)


def _token_dim(v, source: str, where: str) -> int | str | None:
    if v == AUTO:
        return AUTO
    if not isinstance(v, int) or isinstance(v, bool):
        raise SettingsError(f"{source}: {where}: token_dim {v!r} must be an integer (-1: none) or 'auto'")
    return None if v < 0 else v


def cut(array, part: Part, key: str, path: str):
    """Part ``part`` of one rank's shard ``array``."""
    import numpy as np

    if array.ndim == 0:
        raise DumpError(f"{path}: key {key!r}: a 0-d tensor can't be split")
    dim = part.dim % array.ndim
    width = array.shape[dim]
    n = len(part.ratio)
    if part.interleave:
        if width % n:
            raise DumpError(f"{path}: key {key!r}: {width} rows along dim {dim} don't interleave {n} parts")
        return np.take(array, np.arange(part.index, width, n), axis=dim)
    start, size = _span(width, part)
    if size is None:
        raise DumpError(f"{path}: key {key!r}: width {width} along dim {dim} does not split in ratio "
                        f"{list(part.ratio)} (check the map's params for this model)")
    return np.take(array, np.arange(start, start + size), axis=dim)


def _span(width: int, part: Part) -> tuple[int, int | None]:
    """(start, size) of the part in a shard ``width`` wide; size None when the ratio doesn't divide it."""
    total = sum(part.ratio)
    sizes = [width * r // total for r in part.ratio]
    if any(width * r % total for r in part.ratio):
        return 0, None
    return sum(sizes[: part.index]), sizes[part.index]


def split_shape(shape: tuple, part: Part | None) -> tuple:
    """The shape of a part of a shard of ``shape`` (unchecked: :func:`cut` checks)."""
    if part is None or not shape:
        return tuple(shape)
    dim = part.dim % len(shape)
    out = list(shape)
    out[dim] = shape[dim] // len(part.ratio) if part.interleave else (_span(shape[dim], part)[1] or 0)
    return tuple(out)
