"""The planted massive activation of the synthetic checkpoints: which channel, which token, what gain.

Shared by :mod:`.synthetic` (which plants it) and :mod:`.calibration` (whose calibration
sequences open with the token that carries it), so neither imports the other for it.
"""

from __future__ import annotations

import math

MASSIVE_CHANNEL = 5     # residual channel that carries the massive activation
MASSIVE_GAIN = 45.0     # mlp_norm weight on that channel at hidden 128 (the MLP input weights divide by it)


def massive_token(config) -> int:
    """Token id that carries the planted massive activation (the BOS token, else 0)."""
    bos = getattr(config, "bos_token_id", None)
    return 0 if bos is None else int(bos)


def massive_gain(config) -> float:
    """mlp_norm weight of the massive channel: 45 at hidden 128, scaled by sqrt(128 / hidden).

    After RMSNorm a token dominated by one channel has ~sqrt(hidden) there, so this keeps the
    BOS token's MoE input at ~300-400x the typical value for every preset.
    """
    return MASSIVE_GAIN * math.sqrt(128 / config.hidden_size)
