"""Moved to :mod:`inkling_model.switches.precision` (the model's own switches, read by its layers).

``inkling_model.plugins.precision`` stays importable as the same module for one release.
"""
import sys

from inkling_model.switches import precision as _moved

sys.modules[__name__] = _moved
