"""Name maps: regex rules (TOML) that rename recorded keys, e.g. transformers' module paths to the
canonical probe names, so two implementations' dumps share keys.

    drop_unmatched = false        # true: keys that no rule matches are dropped
    [[rule]]                      # tried in order; the first whose pattern fully matches wins
    match = 'model\\.layers\\.(\\d+)\\.self_attn((?:\\.in\\..*)?)'
    to = 'layers.\\1.attn.out\\2'   # re.expand template; "" drops the key

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
from inkling_probe.regex_safety import MAX_KEY_CHARS, compile_bounded

_MAX_MAP_BYTES = 1 << 20


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern
    to: str
    extra: dict = field(default_factory=dict)  # layout keys foreign dumps read (store/foreign/layout.py)


class NameMap:
    """An ordered list of rename rules; :meth:`apply` maps one key (None means: drop it)."""

    def __init__(self, rules: list[Rule], drop_unmatched: bool = False, source: str = "<rules>"):
        self.rules = rules
        self.decisions: list[str] = []  # key globs (after the map) that are routing decisions
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
        if os.path.exists(path):
            if not os.path.isfile(path):
                raise SettingsError(f"{path}: not a regular file (a name map is a TOML file)")
            try:
                with open(path, "rb") as fh:
                    text = fh.read(_MAX_MAP_BYTES + 1).decode("utf-8", errors="replace")
            except OSError as e:
                raise SettingsError(f"{path}: can't read the name map ({e.strerror})") from None
            if len(text) > _MAX_MAP_BYTES:
                raise SettingsError(f"{path}: larger than {_MAX_MAP_BYTES >> 20} MiB; not a name map")
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
        rules = []
        for i, item in enumerate(doc.get("rule", [])):
            if not isinstance(item, dict) or "match" not in item or "to" not in item:
                raise SettingsError(f"{source}: rule {i + 1} needs 'match' and 'to'")
            if not isinstance(item["match"], str) or not isinstance(item["to"], str):
                raise SettingsError(f"{source}: rule {i + 1}: 'match' and 'to' must be strings")
            try:
                rules.append(Rule(compile_bounded(item["match"]), item["to"],
                                  {k: v for k, v in item.items() if k not in ("match", "to")}))
            except (re.error, ValueError, RecursionError) as e:
                raise SettingsError(f"{source}: rule {i + 1} match {item['match']!r}: {e}") from None
        unknown = set(doc) - {"rule", "drop_unmatched", "description", "decisions", "foreign"}
        if unknown:
            raise SettingsError(f"{source}: unknown top-level key {sorted(unknown)[0]!r}")
        nm = cls(rules, bool(doc.get("drop_unmatched", False)), source)
        decisions = doc.get("decisions", [])
        if not isinstance(decisions, list) or not all(isinstance(d, str) for d in decisions):
            raise SettingsError(f"{source}: 'decisions' must be a list of key globs (after the map)")
        nm.decisions = decisions
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
                try:
                    out = m.expand(rule.to) or None
                except (re.error, IndexError) as e:
                    raise SettingsError(f"{self.source}: rule {rule.pattern.pattern!r} -> {rule.to!r}: {e}") from None
                break
        self._cache[key] = out
        return out

    def __repr__(self):
        return f"NameMap({self.source}, {len(self.rules)} rules)"


def shipped_maps() -> list[str]:
    """Names of the maps shipped in inkling_probe/maps/."""
    return sorted(p.name[:-5] for p in resources.files("inkling_probe.maps").iterdir() if p.name.endswith(".toml"))
