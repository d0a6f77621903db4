"""The sink: the one call model code makes at a probe point.

``INKLING_PROBE`` is read once, at import. When it is unset, :func:`probe` is a global lookup and a
return: no allocation, no device sync, no file. Settings are validated at import too, so a bad value
fails at start with a one-line :class:`~inkling_probe.errors.SettingsError`, not mid-run.
"""
from __future__ import annotations

import atexit
import contextlib

from inkling_probe import settings as _settings

_RECORDER = None
_LAYOUT: dict = {}  # this step's layout meta (e.g. the attention-DP requests), merged into every probe


def probe(name, tensor, *, shard="replicated", dim=None, token_dim=0, **meta):
    """Record ``tensor`` under the dotted ``name`` (the HDF5 key) when recording is on.

    ``shard`` declares how this rank's tensor relates to the global one: ``"replicated"`` (every
    rank holds it), ``"concat"`` (rank shards concatenate along ``dim``) or ``"partial"`` (the global
    value is the sum over ranks). ``token_dim`` is the dim a token slice applies to (None: the
    tensor has no token dim and is never sliced); ``meta`` keys
    (JSON-able) are stored with the tensor, after the step's layout (:func:`step`).
    """
    if _RECORDER is None:
        return
    _RECORDER.record(name, tensor, shard=shard, dim=dim, token_dim=token_dim,
                     meta={**_LAYOUT, **meta} if _LAYOUT else meta)


def enabled() -> bool:
    """True while a recorder is active: guard probe-only computations with it."""
    return _RECORDER is not None


def step(**layout) -> None:
    """Mark the start of the next forward (prefill or decode step); the step id of what follows.

    ``layout`` is stored with every tensor of the step, e.g. attention-DP's ``dp_rank``, ``dp_size``
    and ``requests`` (``[[request id, token rows], ...]`` in row order; docs/MODEL.md).
    """
    global _LAYOUT
    if _RECORDER is not None:
        _LAYOUT = layout
        _RECORDER.next_step()


def active_recorder():
    """The active recorder, or None."""
    return _RECORDER


def start(settings) -> None:
    """Install a recorder for ``settings`` (closing any active one)."""
    from inkling_probe.recorder import Recorder

    global _RECORDER
    stop()
    _RECORDER = Recorder(settings)


def stop() -> None:
    """Close the active recorder, completing its last segment."""
    global _RECORDER, _LAYOUT
    recorder, _RECORDER, _LAYOUT = _RECORDER, None, {}
    if recorder is not None:
        recorder.close()


@contextlib.contextmanager
def recording(path, **overrides):
    """Record everything probed inside the block to the dump directory ``path``.

    ``overrides`` are settings by field name (``include``, ``exclude``, ``steps``, ``tokens``,
    ``mode``, ``ranks``, ``overwrite``, ``segment_mb``, ``compress``), as values or as the text the
    matching ``INKLING_PROBE_*`` variable takes. The previous recorder (if any) is restored after.
    """
    global _RECORDER
    previous = _RECORDER
    _RECORDER = None
    start(_settings.make(path, **overrides))
    try:
        yield _RECORDER
    finally:
        stop()
        _RECORDER = previous


@contextlib.contextmanager
def redirected(recorder):
    """Send probe calls to ``recorder`` inside the block (in-graph recording: inkling_probe/graphs)."""
    global _RECORDER
    previous, _RECORDER = _RECORDER, recorder
    try:
        yield recorder
    finally:
        _RECORDER = previous


def configure_from_env(environ=None) -> bool:
    """(Re)read ``INKLING_PROBE_*`` and start or stop recording; True when recording is on."""
    s = _settings.from_env(environ)
    if s is None:
        stop()
        return False
    start(s)
    return True


configure_from_env()
atexit.register(stop)
