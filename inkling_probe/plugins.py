"""Entry-point groups through which models and engines plug into the toolkit.

The toolkit never imports a model: a package registers what it offers in its own metadata
(``[project.entry-points."inkling_probe.<group>"]``) and the toolkit loads it by name on use.

- ``inkling_probe.commands``: extra CLI commands (``name = "module:click_command"``).
- ``inkling_probe.replay_factories``: ``build(ckpt, key, dtype) -> torch.nn.Module`` for replay.
- ``inkling_probe.extract_factories``: ``describe(ckpt, key) -> dict | None`` describing how to
  rebuild one module standalone for a bundle's repro (``extract``).
- ``inkling_probe.toggles``: ``toggles() -> list[Toggle-like dict]`` naming a model's switches
  (environment variables with a good and a bad value) for ``bisect flags --model NAME``.
- ``inkling_probe.computation_env``: ``variables() -> {name: why}`` naming the environment
  variables that change what a model computes, which a bug report's repro carries (bundle/registry.py).

Plug-in code reports bad input by raising :class:`PluginInputError` (a one-line message); the CLI
turns it into exit code 2, so a model never imports the CLI.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from inkling_probe.errors import ProbeError

COMMANDS = "inkling_probe.commands"
REPLAY_FACTORIES = "inkling_probe.replay_factories"
EXTRACT_FACTORIES = "inkling_probe.extract_factories"
TOGGLES = "inkling_probe.toggles"
COMPUTATION_ENV = "inkling_probe.computation_env"


class PluginInputError(ProbeError):
    """Bad input found by a plug-in (a checkpoint that does not load, a module path that does not
    exist): a one-line message naming the value at fault."""


def registered(group: str) -> dict:
    """``{name: EntryPoint}`` of one group, by name."""
    return {ep.name: ep for ep in entry_points(group=group)}


def load_spec(spec: str):
    """The object named by ``MODULE:ATTR``."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def load(group: str, spec: str | None, what: str):
    """A plug-in by ``MODULE:ATTR``, by registered name, or (None) the only one registered.

    Raises :class:`PluginInputError` naming ``what`` (e.g. ``--factory``) when none fits.
    """
    if spec and ":" in spec:
        try:
            return load_spec(spec)
        except (ImportError, AttributeError) as e:
            raise PluginInputError(f"{what} {spec!r}: {e}") from None
    found = registered(group)
    if spec:
        if spec not in found:
            raise PluginInputError(f"{what} {spec!r}: not registered in {group} (registered: {sorted(found) or 'none'})")
        return found[spec].load()
    if len(found) != 1:
        raise PluginInputError(f"{len(found)} plug-ins are registered in {group} ({sorted(found)}): pass {what}")
    return next(iter(found.values())).load()
