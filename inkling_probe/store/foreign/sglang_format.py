"""Writes tensors in SGLang's dumper file format (``sglang.srt.debug_utils.dumper``), for tests and
the worked example (docs/INTEROP.md). This is not SGLang's code: it follows the format that code
writes, so that a folder made here reads exactly as one SGLang's dumper made.

- ``layout="current"`` (SGLang 2026): every rank's files in one experiment folder
  ``<root>/<exp_name>/``, each named ``step=<s>___rank=<r>___dump_index=<i>___name=<name>___
  recompute_status=disabled[___<tags>].pt`` and holding ``{"value": tensor, "meta": {...tags,
  "world_rank", "world_size"}}``; ``dump_index`` counts up per rank.
- ``layout="legacy"``: one folder per TP rank, ``<root>/sglang_dump_<run>_<rank>/``, files named
  ``forward_pass_id=<step>___name=<name>[___<tags>].pt`` holding the tensor itself.
"""
from __future__ import annotations

import os


class SGLangDumpWriter:
    """``dump(name, tensor, rank=, step=, **tags)`` per tensor; files appear as it is called."""

    def __init__(self, root, world_size: int = 1, layout: str = "current", exp_name: str = "dump_20260101_000000_000000",
                 run: str = "1767225600.0"):
        if layout not in ("current", "legacy"):
            raise ValueError(f"layout {layout!r}: 'current' or 'legacy'")
        self.root, self.world_size, self.layout = os.fspath(root), world_size, layout
        self.exp_name, self.run = exp_name, run
        self._index = [0] * world_size

    def dump(self, name: str, tensor, rank: int = 0, step: int = 0, **tags) -> str:
        import torch

        if self.layout == "legacy":
            folder = os.path.join(self.root, f"sglang_dump_{self.run}_{rank}")
            fields = {"forward_pass_id": step, "name": name, **tags}
            payload = tensor
        else:
            folder = os.path.join(self.root, self.exp_name)
            self._index[rank] += 1
            fields = {"step": step, "rank": rank, "dump_index": self._index[rank], "name": name,
                      "recompute_status": "disabled", **tags}
            payload = {"value": tensor, "meta": {**fields, "world_rank": rank, "world_size": self.world_size}}
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "___".join(f"{k}={v}" for k, v in fields.items()) + ".pt")
        torch.save(payload, path)
        return path


def load_sglang_dumper(path):
    """SGLang's own ``dumper.py`` (from an unpacked sglang wheel or checkout), loaded from ``path``
    with the imports that only its HTTP/ZMQ control server and SGLang's runtime use stubbed, so its
    real ``dump()`` and non-intrusive hooks write files here without SGLang installed. Returns the
    module (its ``dumper`` singleton, configured from ``DUMPER_*`` variables). For tests and the
    worked example; this process's ``sys.modules`` gains the stubs (run it in a process of its own).
    """
    import importlib.util
    import sys
    import types

    def stub(name, **attrs):
        module = sys.modules.get(name) or types.ModuleType(name)
        module.__dict__.update(attrs)
        module.__path__ = []  # a package, so its (missing) submodules raise ImportError
        sys.modules[name] = module
        return module

    def unavailable(*_a, **_k):
        raise RuntimeError("SGLang's runtime is not available here")

    for name in ("sglang", "sglang.srt", "sglang.srt.managers"):
        stub(name)
    stub("zmq")
    stub("sglang.srt.managers.io_struct", sock_recv=unavailable, sock_send=unavailable, wrap_as_pickle=unavailable)
    stub("sglang.srt.runtime_context", get_parallel=unavailable, get_server_args=unavailable, get_serving=unavailable)
    stub("sglang.srt.utils", get_device=lambda: "cpu")
    spec = importlib.util.spec_from_file_location("sglang_real_dumper", os.fspath(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
