"""Moved to :mod:`inkling_model.switches.forced_routing` (the model's own switches, read by its layers).

``inkling_model.plugins.forced_routing`` stays importable as the same module for one release.
"""
import sys

from inkling_model.switches import forced_routing as _moved

sys.modules[__name__] = _moved
