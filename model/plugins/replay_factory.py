"""The replay factory inkling_model registers for ``inkling-probe replay`` / ``compare --replay``."""
from __future__ import annotations

from inkling_probe.plugins import PluginInputError as BadInput


def build(ckpt: str, key: str, dtype):
    """inkling_model (TP=1, ``dtype``) loaded from ``ckpt``; its submodule at path ``key``."""
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint

    try:
        config = InklingConfig.from_pretrained(ckpt)
        model = InklingForCausalLM(config, dtype=dtype)
        load_checkpoint(model, ckpt, config)
    except (OSError, ValueError, KeyError) as e:
        raise BadInput(f"--ckpt {ckpt}: {str(e).splitlines()[0]}") from None
    try:
        return model.get_submodule(key)
    except AttributeError:
        raise BadInput(f"{key!r} is not a module path of inkling_model (e.g. layers.2.mlp.experts)") from None
