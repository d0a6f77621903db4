"""scripts/profile_syncs.py's trace summary: host waits, launches, copies and per-stream GPU time a forward."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

from profile_syncs import summarise  # noqa: E402


def _x(cat, name, dur, stream=None):
    event = {"ph": "X", "cat": cat, "name": name, "dur": dur}
    if stream is not None:
        event["args"] = {"stream": stream}
    return event


def test_summary_counts_waits_launches_copies_and_stream_time_per_forward():
    trace = {"traceEvents": [
        _x("cuda_runtime", "cudaStreamSynchronize", 300), _x("cuda_runtime", "cudaEventSynchronize", 100),
        _x("cuda_runtime", "cudaLaunchKernel", 8), _x("cuda_runtime", "cudaLaunchKernel", 12),
        _x("cuda_runtime", "cudaMemcpyAsync", 14),
        _x("kernel", "gemm", 1000, stream=7), _x("gpu_memcpy", "DtoD", 500, stream=7),
        _x("kernel", "stats", 2000, stream=13),
        {"ph": "i", "cat": "cuda_runtime", "name": "cudaStreamSynchronize"},  # not a complete event
        _x("cpu_op", "aten::mm", 50),  # host ops are not GPU time
    ]}
    s = summarise(trace, forwards=2)
    assert s["waits"] == [1.0, 0.2]  # 2 calls / 2 forwards; 400 us / 2 = 0.2 ms
    assert s["launch"] == [1.0, 10.0]  # mean host time a launch, us
    assert s["memcpy"] == [0.5, 14.0]
    assert s["streams"] == {7: [1.0, 0.75], 13: [0.5, 1.0]}


def test_an_empty_trace_summarises_to_zeros():
    s = summarise({"traceEvents": []}, forwards=1)
    assert s["waits"] == [0, 0.0] and s["launch"] == [0, 0.0] and s["streams"] == {}
