"""Moved to :mod:`inkling_model.switches.faults` (the model's own switches, read by its layers).

``inkling_model.plugins.faults`` stays importable as the same module for one release.
"""
import sys

from inkling_model.switches import faults as _moved

sys.modules[__name__] = _moved
