"""Recording settings, read once from ``INKLING_PROBE_*`` variables and validated up front.

Every variable is documented in :data:`VARIABLES` (shown by ``inkling-probe --help`` and in
docs/PROBES.md), so there is one place that says what a setting means.
"""
from __future__ import annotations

import difflib
import fnmatch
import math
import os
from dataclasses import dataclass, field

from inkling_probe.errors import SettingsError

MODES = ("full", "stats", "hash")
COMPRESSIONS = ("none", "gzip")
DURABILITIES = ("disk", "writer")
WRITERS = ("auto", "process", "inline")
MAX_RANK = 99_999  # segment names hold 5 rank digits

VARIABLES = {
    "INKLING_PROBE": "dump directory; recording is on when set (unset: probes return at once)",
    "INKLING_PROBE_INCLUDE": "comma-separated name globs to record (default: all), e.g. 'layers.3.*,logits'",
    "INKLING_PROBE_EXCLUDE": "comma-separated name globs to skip (applied after INCLUDE)",
    "INKLING_PROBE_STEPS": "steps to record: 'N', 'A:B' (B exclusive, either may be empty) or 'N,M,...'",
    "INKLING_PROBE_TOKENS": "token slice 'A:B' (python slice on each probe's token dim), e.g. '0:16', '-1:'",
    "INKLING_PROBE_MODE": "full (tensors + stats, default) | stats (index row only) | hash (content hash only)",
    "INKLING_PROBE_RANKS": "ranks that record: 'all' (default) or 'N,M,...'",
    "INKLING_PROBE_OVERWRITE": "1: replace this rank's files in an existing dump (default: refuse)",
    "INKLING_PROBE_SEGMENT_MB": "start a new segment file when the current one passes this size (default 1024)",
    "INKLING_PROBE_PACK_KB": "tensors smaller than this many KiB are stored back to back in one "
                             "array per step and dtype (default 256; 0: every tensor its own dataset)",
    "INKLING_PROBE_WRITER": "auto (default: process when this process may use 2+ cores, else inline) | "
                            "process (stats, hashing and HDF5 writes in a helper process on another core) | "
                            "inline (all in the recording process)",
    "INKLING_PROBE_WRITER_THREADS": "threads that hash, summarise and write large tensors in parallel "
                                    "(default: 'auto' = the cores beyond 2, at most 4; 0: the writer's own "
                                    "thread does it all)",
    "INKLING_PROBE_WRITER_LANES": "segment files a step's large writes spread over, so two job threads "
                                  "write at once (default: 'auto' = 2 with 2+ writer threads, else 1)",
    "INKLING_PROBE_DURABILITY": "disk (default: step() returns once the step just ended is on disk; "
                                "every completed step survives any kill) | writer (process writer: "
                                "step() returns once that step is with the writer process and the one "
                                "before it on disk; a crash or kill of the model process loses nothing, "
                                "a kill of the writer too, e.g. of the whole process group, may lose the "
                                "last step; faster on GPU)",
    "INKLING_PROBE_RUN": "run id shared by every rank of one launch (default: torchrun's, Slurm's, "
                         "agreed through the process group's store, or from the login session); "
                         "letters, digits, '_' only",
    "INKLING_PROBE_ONCE": "1 (default when unset): a tensor recorded already in the step (same storage, offset, shape, "
                          "strides, dtype, device and version counter) is indexed as a reference to it, "
                          "its bytes stored once | 0: stored again (docs/FORMAT.md, References)",
    "INKLING_PROBE_COMPRESS": "none (default) | gzip (stock HDF5 deflate-1 + shuffle, tensors >= 1 MiB)",
    "INKLING_PROBE_DEBUG": "1: print tracebacks for unexpected errors in the CLI",
    "INKLING_PROBE_FOREIGN_INFLATE": "reading foreign dumps: a file may read as at most this many bytes of "
                                     "tensors per byte of the file (default 256; docs/INTEROP.md)",
    "INKLING_PROBE_GRAPH_MB": "static buffer budget (MiB) for recording inside CUDA graphs (default 256); "
                              "exceeding it is an error at capture (docs/GRAPHS.md)",
}


def glob_patterns(globs) -> tuple[str, ...]:
    """None, one glob or several -> a tuple of globs."""
    return (globs,) if isinstance(globs, str) else tuple(globs or ())


def matches_any(name: str, globs: tuple[str, ...]) -> bool:
    """Does ``name`` match one of ``globs`` (case-sensitive fnmatch)?"""
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


@dataclass(frozen=True)
class StepRange:
    """The steps to record: explicit ids, or a half-open range (either end open)."""

    start: int | None = None
    stop: int | None = None
    ids: frozenset[int] | None = None

    def __str__(self) -> str:  # the variable's text form
        if self.ids is not None:
            return ",".join(map(str, sorted(self.ids)))
        return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}"

    def __contains__(self, step: int) -> bool:
        if self.ids is not None:
            return step in self.ids
        return (self.start is None or step >= self.start) and (self.stop is None or step < self.stop)


@dataclass(frozen=True)
class Settings:
    """Validated recording settings; build with :func:`from_env` or :func:`make`."""

    path: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    steps: StepRange = field(default_factory=StepRange)
    tokens: slice | None = None
    mode: str = "full"
    ranks: frozenset[int] | None = None
    overwrite: bool = False
    segment_mb: float = 1024.0
    compress: str = "none"
    pack_kb: float = 256.0
    writer: str = "auto"
    writer_threads: int | None = None  # None: auto (store/jobs.py default_workers)
    writer_lanes: int | None = None  # None: auto (store/writer.py default_lanes)
    durability: str = "disk"  # "writer": step() waits for the step before, not this one (process writer)
    run: str = ""
    once: bool = True  # a tensor recorded already in the step is stored as a reference (recorder/once.py)

    def wants(self, name: str) -> bool:
        """True when ``name`` passes the include and exclude globs."""
        if self.include and not matches_any(name, self.include):
            return False
        return not matches_any(name, self.exclude)

    def rank_records(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks


def _globs(var: str, text: str) -> tuple[str, ...]:
    globs = tuple(g.strip() for g in text.split(",") if g.strip())
    if text.strip() and not globs:
        raise SettingsError(f"{var}={text!r}: expected comma-separated name globs")
    return globs


def _int(var: str, part: str, whole: str | None = None) -> int:
    try:
        return int(part)
    except ValueError:
        shown = whole if whole is not None else part
        raise SettingsError(f"{var}={shown!r}: {part.strip()!r} is not an integer") from None


def parse_steps(text: str, var: str = "INKLING_PROBE_STEPS") -> StepRange:
    """Parse 'N', 'A:B' or 'N,M' into a :class:`StepRange`."""
    text = text.strip()
    if not text:
        return StepRange()
    if ":" in text:
        a, _, b = text.partition(":")
        start = _int(var, a, text) if a.strip() else None
        stop = _int(var, b, text) if b.strip() else None
        if (start is not None and start < 0) or (stop is not None and stop < 0):
            raise SettingsError(f"{var}={text!r}: steps are >= 0")
        if start is not None and stop is not None and stop <= start:
            raise SettingsError(f"{var}={text!r}: selects no step (A:B is A <= step < B; B must be > A)")
        return StepRange(start=start, stop=stop)
    ids = frozenset(_int(var, s, text) for s in text.split(","))
    if any(i < 0 for i in ids):
        raise SettingsError(f"{var}={text!r}: steps are >= 0")
    return StepRange(ids=ids)


def parse_tokens(text: str, var: str = "INKLING_PROBE_TOKENS") -> slice | None:
    """Parse 'A:B' (python slice, negatives allowed) or 'N' (one token)."""
    text = text.strip()
    if not text:
        return None
    if ":" not in text:
        n = _int(var, text, text)
        return slice(n, n + 1 if n != -1 else None)
    parts = text.split(":")
    if len(parts) != 2:
        raise SettingsError(f"{var}={text!r}: expected 'A:B'")
    a, b = (p.strip() for p in parts)
    tokens = slice(_int(var, a, text) if a else None, _int(var, b, text) if b else None)
    if _empty_slice(tokens):
        raise SettingsError(f"{var}={text!r}: selects no token (A:B is a Python slice; B must be past A)")
    return tokens


def _empty_slice(s: slice) -> bool:
    """Does ``s`` select nothing whatever the length (both ends counted from the same side)?"""
    if s.start is None or s.stop is None:
        return s.stop == 0
    return (s.start >= 0) == (s.stop >= 0) and s.stop <= s.start


def _choice(var: str, text: str, choices: tuple[str, ...]) -> str:
    value = text.strip().lower()
    if value not in choices:
        raise SettingsError(f"{var}={text!r}: expected one of {'|'.join(choices)}")
    return value


def _ranks(var: str, text: str) -> frozenset[int] | None:
    text = text.strip().lower()
    if text in ("", "all"):
        return None
    ranks = frozenset(_int(var, s, text) for s in text.split(","))
    if any(r < 0 for r in ranks):
        raise SettingsError(f"{var}={text!r}: ranks are >= 0")
    return ranks


def _flag(var: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise SettingsError(f"{var}={text!r}: expected 1 or 0")


def env_flag(var: str, environ=None) -> bool:
    """The 0/1 switch ``var`` of the environment (unset or empty: 0): the one reading of every 0/1
    variable, the model's (``INKLING_ENFORCE_EAGER``, ``INKLING_FAULT_<NAME>``) included. 1/true/yes
    is on, 0/false/no off; anything else is a one-line :class:`SettingsError` (a ``ValueError``)
    naming the variable."""
    return _flag(var, (os.environ if environ is None else environ).get(var, ""))


DEBUG = "INKLING_PROBE_DEBUG"


def debug(environ=None) -> bool:
    """``INKLING_PROBE_DEBUG``: show the traceback of an unexpected error. Asked while an error is
    being reported, where raising would hide it, so a bad value reads as 0 here; :func:`from_env`
    (run at start) names it."""
    try:
        return env_flag(DEBUG, environ)
    except SettingsError:
        return False


def _size(var: str, text: str, *, allow_zero: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{var}={text!r}: expected a number") from None
    if not math.isfinite(value):
        raise SettingsError(f"{var}={text!r}: must be a finite number")
    if not (value >= 0 if allow_zero else value > 0):
        raise SettingsError(f"{var}={text!r}: must be {'>=' if allow_zero else '>'} 0")
    return value


_PARSERS = {
    "include": ("INKLING_PROBE_INCLUDE", _globs),
    "exclude": ("INKLING_PROBE_EXCLUDE", _globs),
    "steps": ("INKLING_PROBE_STEPS", lambda v, t: parse_steps(t, v)),
    "tokens": ("INKLING_PROBE_TOKENS", lambda v, t: parse_tokens(t, v)),
    "mode": ("INKLING_PROBE_MODE", lambda v, t: _choice(v, t, MODES)),
    "ranks": ("INKLING_PROBE_RANKS", _ranks),
    "overwrite": ("INKLING_PROBE_OVERWRITE", _flag),
    "segment_mb": ("INKLING_PROBE_SEGMENT_MB", _size),
    "pack_kb": ("INKLING_PROBE_PACK_KB", lambda v, t: _size(v, t, allow_zero=True)),
    "writer": ("INKLING_PROBE_WRITER", lambda v, t: _choice(v, t, WRITERS)),
    "compress": ("INKLING_PROBE_COMPRESS", lambda v, t: _choice(v, t, COMPRESSIONS)),
    "writer_threads": ("INKLING_PROBE_WRITER_THREADS", lambda v, t: _threads(v, t)),
    "writer_lanes": ("INKLING_PROBE_WRITER_LANES", lambda v, t: _lanes(v, t)),
    "durability": ("INKLING_PROBE_DURABILITY", lambda v, t: _choice(v, t, DURABILITIES)),
    "run": ("INKLING_PROBE_RUN", lambda v, t: _run_id(v, t)),
    "once": ("INKLING_PROBE_ONCE", _flag),
}


def _threads(var: str, text: str) -> int | None:
    value = text.strip().lower()
    if value in ("", "auto"):
        return None
    n = _int(var, value, text)
    if not 0 <= n <= 64:
        raise SettingsError(f"{var}={text!r}: expected 'auto' or 0..64")
    return n


def _lanes(var: str, text: str) -> int | None:
    value = text.strip().lower()
    if value in ("", "auto"):
        return None
    n = _int(var, value, text)
    if not 1 <= n <= 8:
        raise SettingsError(f"{var}={text!r}: expected 'auto' or 1..8")
    return n


def _run_id(var: str, text: str) -> str:
    value = text.strip()
    if value and not (len(value) <= 32 and value.replace("_", "").isalnum() and value.isascii()):
        raise SettingsError(f"{var}={text!r}: expected up to 32 letters, digits or '_'")
    return value


def check_unknown(env) -> None:
    """Refuse an ``INKLING_PROBE_*`` variable this version does not know, suggesting the nearest."""
    unknown = sorted(k for k in env if k.startswith("INKLING_PROBE_") and k not in VARIABLES)
    if unknown:
        close = difflib.get_close_matches(unknown[0], VARIABLES, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(sorted(VARIABLES)[1:])}"
        raise SettingsError(f"{unknown[0]}: unknown variable ({hint})")


def _path(text: str) -> str:
    path = text.strip()
    if os.path.exists(path) and not os.path.isdir(path):
        raise SettingsError(f"{path}: exists and is not a directory")
    return path


def rank_from_env(env) -> tuple[int, int]:
    """(RANK, WORLD_SIZE) from ``env`` (defaults 0 and 1), validated: 0 <= RANK < WORLD_SIZE."""
    rank = _int("RANK", env.get("RANK", "0").strip() or "0")
    world = _int("WORLD_SIZE", env.get("WORLD_SIZE", "1").strip() or "1")
    if not 1 <= world <= MAX_RANK + 1:
        raise SettingsError(f"WORLD_SIZE={world}: expected 1..{MAX_RANK + 1}")
    if not 0 <= rank < world:
        raise SettingsError(f"RANK={rank}: expected 0..{world - 1} (WORLD_SIZE={world})")
    return rank, world


def from_env(environ=None) -> Settings | None:
    """Settings from ``INKLING_PROBE_*`` variables, or None when ``INKLING_PROBE`` is unset."""
    env = os.environ if environ is None else environ
    check_unknown(env)
    env_flag(DEBUG, env)
    if not env.get("INKLING_PROBE", "").strip():
        return None
    path = _path(env["INKLING_PROBE"])
    rank_from_env(env)
    values = {name: parse(var, env[var]) for name, (var, parse) in _PARSERS.items() if var in env}
    return Settings(path=path, **values)


def make(path, **overrides) -> Settings:
    """Settings for a programmatic recording: env values first, then ``overrides``.

    Overrides take the same text forms as the variables (``steps="0:4"``) or parsed values.
    """
    env = {k: v for k, v in os.environ.items() if k.startswith("INKLING_PROBE_") or k in ("RANK", "WORLD_SIZE")}
    base = from_env({**env, "INKLING_PROBE": os.fspath(path)})
    values = {}
    for name, value in overrides.items():
        if name not in _PARSERS:
            raise SettingsError(f"{name}: unknown recording setting (known: {', '.join(_PARSERS)})")
        var, parse = _PARSERS[name]
        values[name] = value if isinstance(value, (StepRange, slice)) else parse(var, _as_text(value))
    return Settings(**{**base.__dict__, **values})


def _as_text(value) -> str:
    """An override in the text form its variable takes, so one parser validates both."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (set, frozenset)):
        value = sorted(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
