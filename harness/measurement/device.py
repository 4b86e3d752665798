"""Which device a sweep runs on, and the environment summary every ledger row carries."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket

# Where a host's stable identity is read (systemd's, then D-Bus's copy): it outlives a rename
# of the host, and two cloned VMs with one hostname still differ by it.
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
# Hex digits of the host hash a row keeps: 64 bits tell a fleet's hosts apart and are far too few
# to look a machine id up by.
HOST_HASH_CHARS = 16
# Mixed into the hash so a row's host id matches no other program's hash of the same machine id.
HOST_HASH_SALT = b"bench host id\0"


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
        "host": host_id(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "triton": _version("triton") or _version("pytorch-triton"),
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
        env.update({"gpu": None, "gpu_index": None, "gpu_uuid": None, "gpu_serial": None,
                    "cpu": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads()})
    return env


@functools.lru_cache(maxsize=None)
def host_id() -> str:
    """This host, named without naming it: ``machine-id:<hash>`` (the first of MACHINE_ID_FILES
    that reads), else ``hostname:<hash>`` — a salted SHA-256, HOST_HASH_CHARS hex digits. A
    hostname can say whose machine it is and a machine id is meant to stay private; the hash
    is stable, so rows of one host still match, and two hosts' rows are told apart."""
    for path in MACHINE_ID_FILES:
        try:
            with open(path, "rb") as f:
                ident = f.read().strip()
        except OSError:
            continue
        if ident:
            return f"machine-id:{hashlib.sha256(HOST_HASH_SALT + ident).hexdigest()[:HOST_HASH_CHARS]}"
    name = socket.gethostname().encode()
    return f"hostname:{hashlib.sha256(HOST_HASH_SALT + name).hexdigest()[:HOST_HASH_CHARS]}"


def gpu_identity() -> dict:
    """Which physical GPU this process measures on (torch's device 0): its NVML index, UUID and
    board serial (where NVML gives one; None else), so rows from two cards of one model — one
    host's or two hosts' — say which card each came from, whatever CUDA_VISIBLE_DEVICES
    renumbered."""
    import torch

    raw = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    uuid = str(raw) if raw else None
    if uuid and not uuid.startswith(("GPU-", "MIG-")):
        uuid = f"GPU-{uuid}"
    index = serial = None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        index = int(pynvml.nvmlDeviceGetIndex(handle))
    except Exception:  # no NVML: the first visible device, when CUDA_VISIBLE_DEVICES names it by number
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        index = int(first) if first.isdigit() else None
    else:
        try:  # boards without a serial (most consumer cards) say NotSupported
            s = pynvml.nvmlDeviceGetSerial(handle)
            serial = (s.decode() if isinstance(s, bytes) else str(s)).strip() or None
        except pynvml.NVMLError:
            serial = None
    return {"gpu_index": index, "gpu_uuid": uuid, "gpu_serial": serial}


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception as exc:  # NVML is optional: the row says why it is missing
        return f"unknown ({type(exc).__name__})"
