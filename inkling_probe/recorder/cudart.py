"""The CUDA runtime as the recording thread calls it: cudaMemcpyAsync and cudaGetLastError of the
loaded libcudart through ctypes, and the current device and stream read without torch's checks (a
probe asks for them each call)."""
from __future__ import annotations

import functools


def _clear_cuda_error() -> None:
    """Reset the CUDA runtime's last error after a refused (un)registration, so torch's next kernel
    launch check does not report it as its own: cudaGetLastError of the loaded libcudart."""
    import ctypes

    try:
        for path in _loaded_cudart():
            ctypes.CDLL(path).cudaGetLastError()
    except OSError:
        pass



_DEVICE_TO_DEVICE = 3  # cudaMemcpyDeviceToDevice


@functools.cache
def _device_memcpy():
    """cudaMemcpyAsync of the CUDA runtime this process loaded (torch's), through ctypes; None where
    none is loaded as a shared library (a static build): batches then copy with ``copy_``. A probe's
    copy this way skips torch's dispatch and TensorIterator set-up, about half of what appending a
    tensor cost the launch-bound recording thread (scripts/profile_record_cuda.py)."""
    import ctypes

    for path in _loaded_cudart():
        try:
            memcpy = ctypes.CDLL(path).cudaMemcpyAsync
        except (OSError, AttributeError):
            continue
        memcpy.restype = ctypes.c_int
        memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        return memcpy
    return None


def _loaded_cudart() -> list:
    """Paths of the CUDA runtime libraries mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            return sorted({line.split()[-1] for line in maps if "libcudart" in line.rsplit("/", 1)[-1]})
    except OSError:
        return []


def _check_cuda(error: int) -> None:
    if error:
        _clear_cuda_error()
        raise RuntimeError(f"cudaMemcpyAsync into the recording's batch failed (CUDA error {error})")


def _current_device() -> int:
    return _device_getter()()


@functools.cache
def _device_getter():
    """The current CUDA device's index, without ``torch.cuda.current_device``'s lazy-init check (a
    probe asks once; its tensor is on a device, so CUDA is initialised)."""
    import torch

    return getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _current_stream(t):
    import torch

    return torch.cuda.current_stream(t.device) if t.is_cuda else None


def _stream_key(t):
    """What identifies ``t``'s device and current stream, cheaply (a probe asks for it each call)."""
    if not t.is_cuda:
        return None
    index = t.get_device()
    return index, _raw_stream()(index)


@functools.cache
def _raw_stream():
    """device index -> its current stream's handle: torch's raw getter where it has one."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw or (lambda index: torch.cuda.current_stream(index).cuda_stream)


def _on_stream(stream):
    import contextlib

    import torch

    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
