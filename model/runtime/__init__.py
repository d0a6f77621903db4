"""The decode runtime: the static KV and conv-state pool (:mod:`.kv_pool`), decode-step CUDA
graphs (:mod:`.graphs`) and :class:`~inkling_model.runtime.runtime.Runtime`, which serves
requests from them (docs/GRAPHS.md)."""
