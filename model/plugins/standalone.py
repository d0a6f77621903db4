"""What ``inkling-probe extract`` needs to rebuild one inkling_model module without the model.

Registered in the ``inkling_probe.extract_factories`` entry-point group. :func:`describe` names
the checkpoint tensors a module loads; :func:`build` is what the extracted test calls: it makes
the module alone from its config and those tensors, through the real weight mapper, so a loader
bug (model/switches/faults.py) is reproduced by the test the way the model would hit it. Supported:
``layers.N.mlp.experts`` (routed experts, bf16/fp32 or NVFP4); other keys return None (the
extracted test is then the tensor-level check).
"""
from __future__ import annotations

import re

_EXPERTS = re.compile(r"^layers\.(\d+)\.mlp\.experts$")


def describe(ckpt: str, key: str) -> dict | None:
    """``{"config": dict, "tensors": {native name: tensor}, "build": "module:function"}`` for ``key``,
    or None when this module is not rebuilt standalone."""
    from inkling_model.checkpoint.shards import iter_tensors
    from inkling_model.checkpoint.layout import PREFIX
    from inkling_model.config import InklingConfig

    match = _EXPERTS.match(key)
    if not match:
        return None
    config = InklingConfig.from_pretrained(ckpt)
    if not config.is_moe(int(match[1])):
        return None
    prefix = f"{PREFIX}{key}."
    tensors = {name: t for _, name, t in iter_tensors(ckpt) if name.startswith(prefix)}
    return {"config": config.to_dict(), "tensors": tensors, "build": "inkling_model.plugins.standalone:build"}


def build(config: dict, key: str, tensors: dict, dtype):
    """Module ``key`` alone (TP=1, parameters in ``dtype``), loaded from its native ``tensors``."""
    from inkling_model.config import InklingConfig
    from inkling_model.layers.experts import RoutedExperts
    from inkling_model.model import _default_dtype
    from inkling_model.parallel import Parallel
    from inkling_model.checkpoint.weights import load_tensors

    cfg = InklingConfig.from_dict(config)
    layer = int(_EXPERTS.match(key)[1])
    with _default_dtype(dtype):
        module = RoutedExperts(cfg, layer, Parallel())  # bf16 or NVFP4 weights, as the config says
    load_tensors(module, tensors, config=cfg, module_prefix=key + ".")
    return module.eval()
