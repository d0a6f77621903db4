"""environment.json: versions, GPU and driver, and the variables that steer a run, secrets redacted.

Kept: ``INKLING_*``, ``NCCL_*``, ``CUDA_*``, ``TORCH_*`` (and a few named ones such as
``PYTORCH_CUDA_ALLOC_CONF``). Redacted: values of names that say token, key, secret, password,
credential or auth; values that look like secrets whatever their name (provider token prefixes,
long hex or base64 runs, ``user:password@`` in URLs). The home folder is written as ``~``.
"""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from importlib import metadata

PREFIXES = ("INKLING_", "NCCL_", "CUDA_", "TORCH_")
NAMED = ("PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", "NVIDIA_TF32_OVERRIDE")
PACKAGES = ("inkling-probe", "torch", "numpy", "h5py", "transformers", "safetensors", "triton", "click", "rich",
            "matplotlib", "flashinfer-python", "vllm", "sglang", "tensorrt-llm")
REDACTED = "<redacted>"

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSWD|CREDENTIAL|AUTH|(^|_)KEY($|_)|APIKEY|PRIVATE", re.I)
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|sk-[A-Za-z0-9_-]{16,}|xox[abpr]-[\w-]{10,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[\w-]{10,}\.[\w-]{10,}\.[\w-]*|\b[0-9a-fA-F]{32,}\b|(?=[A-Za-z_+-]*\d)[A-Za-z0-9+_-]{40,}={0,2})")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^/@:\s]*)(:(?P<pw>[^/@\s]*))?@")


def redact(name: str, value: str) -> str:
    """``value`` with anything that looks like a secret replaced by ``<redacted>``."""
    if _SECRET_NAME.search(name):
        return REDACTED
    value = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", value)
    value = _SECRET_VALUE.sub(REDACTED, value)
    home = os.path.expanduser("~")
    return value.replace(home, "~") if home not in ("", "/") else value


def variables(environ=None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    keep = {k: v for k, v in environ.items() if k.startswith(PREFIXES) or k in NAMED}
    return {k: redact(k, v) for k, v in sorted(keep.items())}


def packages() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def gpu() -> dict:
    """torch's view of CUDA when torch is already imported (the report never imports it), and
    nvidia-smi's GPU names and driver when it is on PATH."""
    out = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cuda"] = getattr(torch.version, "cuda", None)
        out["cuda_available"] = bool(torch.cuda.is_available())
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout
        out["gpus"] = [line.strip() for line in text.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        out["gpus"] = []
    return out


def collect(environ=None) -> dict:
    """The whole environment.json document."""
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "packages": packages(), "gpu": gpu(), "variables": variables(environ)}


def recorded(dumps: dict) -> dict:
    """What each dump says about the run that recorded it (torch, Python, its variables, redacted):
    the machine that ran the candidate is often not the one writing the report."""
    out = {}
    for side, d in dumps.items():
        run = d.segments[0].run if d.segments else {}
        out[side] = {"torch": run.get("torch"), "python": run.get("python"), "world_size": d.world_size,
                     "variables": variables(run.get("env") or {})}
    return out
