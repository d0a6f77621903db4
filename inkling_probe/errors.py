"""Errors the toolkit raises for bad input: each carries a one-line message naming the culprit."""


class ProbeError(Exception):
    """Base class: an expected failure with a one-line, user-facing message."""


class SettingsError(ProbeError, ValueError):
    """An ``INKLING_PROBE_*`` variable (or a recording setting) has a bad value."""


class DumpError(ProbeError):
    """A dump is missing, unreadable, from another program, or of an unknown schema."""


class KeyNotFound(DumpError, KeyError):
    """A key (or step, rank) is not in the dump."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class ValuesNotStored(DumpError):
    """The index row exists but its values were not stored (``stats`` or ``hash`` mode)."""


class RanksMissing(DumpError):
    """A sharded tensor lacks some ranks' shards, so its global value can't be reassembled."""


class NothingRecorded(DumpError):
    """A recording ended without one tensor recorded: every probe call was filtered out (or none came)."""
