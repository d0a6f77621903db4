"""Moved to :mod:`inkling_probe.procs` (the one command runner, shared with ``graphdiff``).

``inkling_probe.bisect.procs`` stays importable as the same module for one release.
"""
import sys

from inkling_probe import procs as _procs

sys.modules[__name__] = _procs
