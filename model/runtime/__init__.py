"""The decode runtime over the model's one KV cache (inkling_model/layers/kv_cache.py): decode-step CUDA
graphs (:mod:`.graphs`) and :class:`~inkling_model.runtime.runtime.Runtime`, which serves
requests from them (docs/GRAPHS.md)."""
