"""Name maps: regex rules (TOML) that rename recorded keys, e.g. transformers' module paths to the
canonical probe names, so two implementations' dumps share keys.

    drop_unmatched = false        # true: keys that no rule matches are dropped
    [[rule]]                      # tried in order; the first whose pattern fully matches wins
    match = 'model\\.layers\\.(\\d+)\\.self_attn((?:\\.in\\..*)?)'
    to = 'layers.\\1.attn.out\\2'   # re.expand template; "" drops the key

Patterns run under RE2 (linear time in the key's length, whatever the pattern; no look-arounds or
back-references; see :mod:`inkling_probe.regex_safety`). Values are type-checked: ``drop_unmatched``
must be a TOML boolean (``"false"``, a string, is refused rather than read as true).

Shipped maps live in ``inkling_probe/maps/<name>.toml`` and load by name (``NameMap.load("hf_inkling")``).
Rules may also declare how a foreign dump's tensors combine (``shard``, ``dim``, ``token_dim``,
``split``, ``shift``, and a ``[foreign]`` table): read when such a dump is opened, docs/INTEROP.md.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources

from inkling_probe.errors import SettingsError
from inkling_probe.store.inputs import BadInputFile, read_bytes
from inkling_probe.regex_safety import MAX_KEY_CHARS, compile_bounded, compile_template, expand

_MAX_MAP_BYTES = 1 << 20

# how a foreign dump's tensors combine, read by store/foreign/layout.py (docs/INTEROP.md)
FOREIGN_RULE_KEYS = frozenset({"shard", "dim", "token_dim", "split", "shift"})


@dataclass(frozen=True)
class Rule:
    pattern: object  # compiled by RE2 (regex_safety.compile_bounded): linear-time, re-like fullmatch
    to: str
    parts: tuple = ()  # ``to`` parsed against the pattern's groups (regex_safety.compile_template)
    extra: dict = field(default_factory=dict)  # layout keys foreign dumps read (store/foreign/layout.py)


class NameMap:
    """An ordered list of rename rules; :meth:`apply` maps one key (None means: drop it)."""

    def __init__(self, rules: list[Rule], drop_unmatched: bool = False, source: str = "<rules>"):
        self.rules = rules
        self.decisions: list[str] = []  # key globs (after the map) that are routing decisions
        self.mixing: list[str] = []  # key globs (after the map) of ops that mix token rows (compare/reach.py)
        self.foreign: dict = {}  # the [foreign] table: token dim and params for foreign dumps
        self.drop_unmatched = drop_unmatched
        self.source = source
        self._cache: dict[str, str | None] = {}

    @classmethod
    def load(cls, spec) -> "NameMap":
        """A map from a TOML file path, or a shipped map's name (``"hf_inkling"``)."""
        if isinstance(spec, NameMap):
            return spec
        path = os.fspath(spec)
        if os.path.lexists(path):
            try:  # regular files only (a FIFO would hang the read), at most 1 MiB
                text = read_bytes(path, "name map", _MAX_MAP_BYTES).decode("utf-8", errors="replace")
            except BadInputFile as e:
                raise SettingsError(str(e)) from None
            return cls.from_toml(text, source=path)
        shipped = resources.files("inkling_probe.maps") / f"{path}.toml"
        if shipped.is_file():
            return cls.from_toml(shipped.read_text(), source=f"shipped map {path!r}")
        raise SettingsError(f"{path}: no such name map file (shipped maps: {', '.join(shipped_maps())})")

    @classmethod
    def from_toml(cls, text: str, source: str = "<toml>") -> "NameMap":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise SettingsError(f"{source}: not valid TOML ({e})") from None
        unknown = set(doc) - {"rule", "drop_unmatched", "description", "decisions", "mixing", "foreign"}
        if unknown:
            raise SettingsError(f"{source}: unknown top-level key {sorted(unknown)[0]!r}")
        drop = doc.get("drop_unmatched", False)
        if not isinstance(drop, bool):  # "false" (a string) would read as true and drop rows
            raise SettingsError(f"{source}: 'drop_unmatched' must be true or false (a TOML boolean, "
                                f"not {drop!r})")
        if not isinstance(doc.get("description", ""), str):
            raise SettingsError(f"{source}: 'description' must be a string")
        globs = {}
        for name in ("decisions", "mixing"):
            globs[name] = doc.get(name, [])
            if not isinstance(globs[name], list) or not all(isinstance(d, str) for d in globs[name]):
                raise SettingsError(f"{source}: {name!r} must be a list of key globs (after the map)")
        nm = cls(_rules(doc.get("rule", []), source), drop, source)
        nm.decisions, nm.mixing = globs["decisions"], globs["mixing"]
        nm.foreign = doc.get("foreign", {})  # how foreign dumps read (store/foreign/layout.py)
        return nm

    def apply(self, key: str) -> str | None:
        """The renamed key, the key itself when no rule matches, or None when it is dropped."""
        if key in self._cache:
            return self._cache[key]
        if len(key) > MAX_KEY_CHARS:
            raise SettingsError(f"key {key[:40]!r}... is {len(key)} characters; name maps match keys of "
                                f"at most {MAX_KEY_CHARS}")
        out = None if self.drop_unmatched else key
        for rule in self.rules:
            m = rule.pattern.fullmatch(key)
            if m:
                if "split" in rule.extra:
                    raise SettingsError(f"{self.source}: rule {rule.pattern.pattern!r} splits {key!r} into parts: "
                                        "give this map when the dump is read (docs/INTEROP.md)")
                out = expand(rule.parts, m) or None
                break
        self._cache[key] = out
        return out

    def __repr__(self):
        return f"NameMap({self.source}, {len(self.rules)} rules)"


def _rules(items, source: str) -> list[Rule]:
    """The ``[[rule]]`` tables, each type-checked and its pattern compiled for linear-time matching."""
    if not isinstance(items, list):
        raise SettingsError(f"{source}: 'rule' must be an array of tables ([[rule]])")
    rules = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "match" not in item or "to" not in item:
            raise SettingsError(f"{source}: rule {i + 1} needs 'match' and 'to'")
        if not isinstance(item["match"], str) or not isinstance(item["to"], str):
            raise SettingsError(f"{source}: rule {i + 1}: 'match' and 'to' must be strings")
        extra = set(item) - {"match", "to"} - FOREIGN_RULE_KEYS
        if extra:
            raise SettingsError(f"{source}: rule {i + 1}: unknown key {sorted(extra)[0]!r}")
        try:
            pattern = compile_bounded(item["match"])
        except (re.error, ValueError, RecursionError) as e:
            raise SettingsError(f"{source}: rule {i + 1} match {item['match']!r}: {e}") from None
        try:
            parts = tuple(compile_template(item["to"], pattern))
        except ValueError as e:
            raise SettingsError(f"{source}: rule {i + 1} to {item['to']!r}: {e}") from None
        rules.append(Rule(pattern, item["to"], parts, {k: v for k, v in item.items() if k in FOREIGN_RULE_KEYS}))
    return rules


def shipped_maps() -> list[str]:
    """Names of the maps shipped in inkling_probe/maps/."""
    return sorted(p.name[:-5] for p in resources.files("inkling_probe.maps").iterdir() if p.name.endswith(".toml"))
