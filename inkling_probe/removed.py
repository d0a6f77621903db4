"""Names removed in 0.2.0 (CHANGELOG.md): importing one fails with one line naming its new home.

A removed module is a stub file whose only line raises :func:`gone`; a removed name is answered by
its module's ``__getattr__`` (:func:`module_getattr`). The stubs themselves go in 0.3.0.
"""
from __future__ import annotations

RELEASE = "0.2.0"


class Removed(ImportError):
    """An import of a module or name removed in :data:`RELEASE`; the message names what replaces it."""


def gone(old: str, new: str) -> Removed:
    """The error for ``old``, replaced by ``new`` (a dotted path, or a sentence)."""
    return Removed(f"{old} was removed in {RELEASE}: use {new}", name=old)


def module_getattr(module: str, moved: dict[str, str]):
    """A module-level ``__getattr__``: each name of ``moved`` raises :func:`gone` (so
    ``from module import name`` fails with that line), any other name is an AttributeError."""

    def __getattr__(name: str):
        if name in moved:
            raise gone(f"{module}.{name}", moved[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
