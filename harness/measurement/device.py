"""Which device a sweep runs on, and the environment summary every ledger row carries."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket


def detect_device() -> str:
    """'cuda' when torch sees a GPU, else 'cpu' (the same commands run on both)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def env_summary(device: str) -> dict:
    """Versions and device facts that decide what a number means (cached per process)."""
    import torch

    env = {
        "device": device,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cupy": next((v for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy") if (v := _version(d))), None),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
        "cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update({
            "gpu": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "gpu_memory_bytes": props.total_memory,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "driver": driver_version(),
            **gpu_identity(),
        })
    else:
        env.update({"gpu": None, "gpu_index": None, "gpu_uuid": None, "cpu": platform.processor() or platform.machine(),
                    "torch_threads": torch.get_num_threads()})
    return env


def gpu_identity() -> dict:
    """Which physical GPU this process measures on (torch's device 0): its NVML index and
    UUID, so rows from several GPUs of one host say which one each came from, whatever
    CUDA_VISIBLE_DEVICES renumbered."""
    import torch

    raw = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    uuid = str(raw) if raw else None
    if uuid and not uuid.startswith(("GPU-", "MIG-")):
        uuid = f"GPU-{uuid}"
    index = None
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int(pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)))
    except Exception:  # no NVML: the first visible device, when CUDA_VISIBLE_DEVICES names it by number
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        index = int(first) if first.isdigit() else None
    return {"gpu_index": index, "gpu_uuid": uuid}


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception as exc:  # NVML is optional: the row says why it is missing
        return f"unknown ({type(exc).__name__})"
