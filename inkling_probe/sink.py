"""The sink: the one call model code makes at a probe point.

``INKLING_PROBE`` is read once, at import. When it is unset, :func:`probe` is a global lookup and a
return: no allocation, no device sync, no file. Settings are validated at import too, so a bad value
fails at start with a one-line :class:`~inkling_probe.errors.SettingsError`, not mid-run (in the
``inkling-probe`` command itself the error waits for a command, so ``--help`` always works).

While a recorder is active, an uncaught inkling-probe error prints as one line (the traceback with
``INKLING_PROBE_DEBUG=1``), and an uncaught exception marks the step it interrupted as incomplete.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys

from inkling_probe import settings as _settings
from inkling_probe.errors import NothingRecorded, ProbeError

_RECORDER = None
_LAYOUT: dict = {}  # this step's layout meta (e.g. the attention-DP requests), merged into every probe
ENV_ERROR: ProbeError | None = None  # a bad INKLING_PROBE_* found at import by the CLI process
_UNCAUGHT = []  # set by the except hook: the program is dying of an exception


def _never() -> bool:
    return False


# Under torch.compile a probe becomes one node of the registered op (inkling_probe/tracing/op.py), which
# binds itself here when imported (bind_tracing): this module never imports torch or that package.
_COMPILING = _never  # torch.compiler.is_compiling
_TRACED = None  # inkling_probe.tracing.op.traced_probe
_TRACED_STEP = None  # inkling_probe.tracing.op.traced_step


def probe(name, tensor, *, shard="replicated", dim=None, token_dim=0, **meta):
    """Record ``tensor`` under the dotted ``name`` (the HDF5 key) when recording is on.

    ``shard`` declares how this rank's tensor relates to the global one: ``"replicated"`` (every
    rank holds it), ``"concat"`` (rank shards concatenate along ``dim``) or ``"partial"`` (the global
    value is the sum over ranks). ``token_dim`` is the dim a token slice applies to (None: the
    tensor has no token dim and is never sliced); ``meta`` keys
    (JSON-able) are stored with the tensor, after the step's layout (:func:`step`).

    Inside ``torch.compile`` the call traces to one ``inkling_probe::emit`` node (no graph break; the
    name becomes an id fixed at trace time) that records the tensor as the compiled program holds it
    (docs/COMPILE.md). With recording off it leaves no node.
    """
    if _RECORDER is None:
        return
    if _COMPILING():
        _TRACED(name, tensor, shard, dim, token_dim, meta)
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
    if _RECORDER is not None and _COMPILING():
        _TRACED_STEP(layout)  # an ordered node of the compiled graph, which calls this eagerly
    elif _RECORDER is not None:
        _LAYOUT = layout
        _RECORDER.next_step()


def step_layout() -> dict:
    """The current step's layout (what :func:`step` was given), merged into every probe's meta."""
    return dict(_LAYOUT)


def active_recorder():
    """The active recorder, or None."""
    return _RECORDER


def start(settings, early_writer: bool = True) -> None:
    """Install a recorder for ``settings`` (closing any active one); ``early_writer``: start the
    writer process now, so its start-up overlaps the model's (else at the first recorded tensor)."""
    from inkling_probe.recorder.recorder import Recorder

    global _RECORDER
    stop()
    _install_excepthook()
    _RECORDER = Recorder(settings, early_writer=early_writer)


def bind_tracing(compiling, traced_probe, traced_step) -> None:
    """The compiled path (inkling_probe/tracing/op.py binds it on import): ``compiling()`` says whether
    dynamo is tracing; then a probe is ``traced_probe(...)`` and a step ``traced_step(layout)``."""
    global _COMPILING, _TRACED, _TRACED_STEP
    _COMPILING, _TRACED, _TRACED_STEP = compiling, traced_probe, traced_step


def stop(interrupted: bool = False) -> None:
    """Close the active recorder, completing its last segment (``interrupted``: the current step
    did not finish, so it is not marked complete)."""
    global _RECORDER, _LAYOUT
    recorder, _RECORDER, _LAYOUT = _RECORDER, None, {}
    if recorder is not None:
        recorder.close(interrupted=interrupted)


def _stop_at_exit() -> None:
    """atexit: close quietly; a failure is one line, never a traceback."""
    try:
        stop(interrupted=bool(_UNCAUGHT))
    except NothingRecorded as e:  # a filter selected nothing: the program must not look like it recorded
        sys.stderr.write(f"inkling-probe: {e}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2)  # atexit can't set the status otherwise (a SystemExit here is ignored)
    except ProbeError as e:
        sys.stderr.write(f"inkling-probe: {e}\n")
    except Exception as e:  # noqa: BLE001 - the interpreter is exiting: say it in one line
        sys.stderr.write(f"inkling-probe: closing the dump failed: {type(e).__name__}: {e}\n")


def _install_excepthook() -> None:
    if getattr(sys.excepthook, "_inkling_probe", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        _UNCAUGHT.append(kind)
        if isinstance(value, ProbeError) and not _settings.debug():
            sys.stderr.write(f"inkling-probe: {value}\n")
            return
        previous(kind, value, tb)

    hook._inkling_probe = True
    sys.excepthook = hook


def _after_fork_in_child() -> None:
    if _RECORDER is not None:
        _RECORDER.after_fork_in_child()


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
    ok = False
    try:
        yield _RECORDER
        ok = True
    finally:
        try:
            stop(interrupted=not ok)
        finally:
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


def configure_from_env(environ=None, early_writer: bool = True) -> bool:
    """(Re)read ``INKLING_PROBE_*`` and start or stop recording; True when recording is on."""
    s = _settings.from_env(environ)
    if s is None:
        stop()
        return False
    start(s, early_writer)
    return True


def _is_cli() -> bool:
    """Is this process the ``inkling-probe`` command (which reports a bad variable per command)?"""
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    return argv0.startswith("inkling-probe") or "inkling_probe.cli" in getattr(sys, "orig_argv", ())


try:
    configure_from_env(early_writer=not _is_cli())  # the command itself records nothing
except ProbeError as _e:
    if not _is_cli():
        _install_excepthook()
        raise
    ENV_ERROR = _e
atexit.register(_stop_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
