"""Checkpoints in the native Inkling layout (docs/CHECKPOINT.md): the layout (:mod:`.layout`),
safetensors shards and their index (:mod:`.shards`), the weight mapper that loads them into the
model (:mod:`.weights`), random checkpoints (:mod:`.synthetic`, :mod:`.massive`) with NVFP4
calibration (:mod:`.calibration`), and transformers' Inkling loaded from them
(:mod:`.hf_reference`)."""
