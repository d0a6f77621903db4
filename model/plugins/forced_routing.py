"""Removed in 0.2.0: this stub names the new home on import (CHANGELOG.md)."""
from inkling_probe.removed import gone

raise gone(__name__, "inkling_model.switches.forced_routing")
