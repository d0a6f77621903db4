"""The step-each-forward hooks of open ``record(steps="auto")`` blocks, by handle: what the
``inkling_probe::forward_step`` node of a compiled forward runs (op.py; hooks.py makes them)."""
from __future__ import annotations

import itertools

_STEPPERS: dict = {}  # handle -> an object with .forward() (hooks._StepEachForward)
_HANDLES = itertools.count()


def register(stepper) -> int:
    """A new handle for ``stepper``, until :func:`forget`."""
    handle = next(_HANDLES)
    _STEPPERS[handle] = stepper
    return handle


def forget(handle: int) -> None:
    _STEPPERS.pop(handle, None)


def run(handle: int) -> None:
    """The node's run-time half: the stepper's eager decision (nothing once its block has ended)."""
    stepper = _STEPPERS.get(handle)
    if stepper is not None:
        stepper.forward()
