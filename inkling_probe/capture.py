"""Former name of :mod:`inkling_probe.hooks` (module hooks), kept so existing imports work;
"capture" now means CUDA-graph capture only."""
from inkling_probe.hooks import flatten, record  # noqa: F401

__all__ = ["flatten", "record"]
