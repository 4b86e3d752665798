"""Device identity: which device a number was measured on, read one way everywhere.

Nothing here changes what is on disk. A row's ``env`` (harness.measurement.device.env_summary)
names its device by ``device`` ("cuda" or "cpu"), ``gpu`` (the GPU model's name), ``gpu_uuid``,
``gpu_serial`` (where NVML gives one) and ``gpu_index``, its host by ``host`` (a salted hash,
never the hostname: ``device.host_id``), and the software it ran on by the versions of
``STACK_FIELDS``; a ceilings row names it by its ``fingerprint`` (device, name, driver, cuda,
torch: harness.measurement.ceilings.device_fingerprint). Resume, verdicts, routes and ceilings
compare devices by model — (device, GPU name) — and a host locks each physical device by
``device_key``; a verdict also pools only rows of one software stack (outcomes.places).
A replication (registration/replication.py) tells two *instances* of one model apart by
``instance``: the host and the card's UUID or serial (the host alone on the CPU).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping

# The software a number depends on beside the commit's own code, as env_summary records it:
# torch, the CUDA runtime torch runs on, cuDNN, Triton, cupy and the driver. Rows that differ
# in any of them are never pooled into one verdict.
STACK_FIELDS = ("torch", "cuda", "cudnn", "triton", "cupy", "driver")
# A stack field a row never recorded (rows from before it was): not a difference.
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class DeviceEnv:
    """The identity fields of a row's ``env`` (or of an ``instance``): the device kind, GPU
    model, host and card. A field the env does not hold reads None (``gpu_index`` 0, the
    first card, as the lock has always read it)."""

    device: Any = None
    gpu: Any = None
    host: Any = None
    gpu_uuid: Any = None
    gpu_serial: Any = None
    gpu_index: Any = 0

    @classmethod
    def of(cls, env: Mapping) -> "DeviceEnv":
        """The identity fields ``env`` holds (vocab/ sits below ledger/: read here, not through
        ledger/payloads.py's Env)."""
        return cls(**{f.name: env[f.name] for f in dataclasses.fields(cls) if f.name in env})

    @property
    def card(self) -> Any:
        """The card's UUID, else its board serial (None: the CPU, or a card NVML named neither way)."""
        return self.gpu_uuid or self.gpu_serial


@dataclass(frozen=True)
class Fingerprint:
    """The model fields of a ceilings row's ``fingerprint`` (measurement/ceilings.py
    ``device_fingerprint``): the device kind and the model's name."""

    device: Any = None
    name: Any = None

    @classmethod
    def of(cls, fingerprint: Mapping) -> "Fingerprint":
        """The model fields ``fingerprint`` holds (None: not held)."""
        return cls(**{f.name: fingerprint[f.name] for f in dataclasses.fields(cls) if f.name in fingerprint})


def stack(env: dict) -> dict:
    """The software stack an env records: each of STACK_FIELDS it holds (a field it holds as
    null is recorded as absent from that host: cupy not installed, cuDNN on the CPU)."""
    return {f: env[f] for f in STACK_FIELDS if f in env}


def stack_text(versions: dict) -> str:
    """``torch 2.11.0+cu130, cuda 13.0, ...`` ("none" for a null), in STACK_FIELDS order."""
    return ", ".join(f"{f} {'none' if versions[f] is None else versions[f]}" for f in STACK_FIELDS
                     if f in versions) or "no versions recorded"


def model(env: dict) -> tuple[str | None, str | None]:
    """(device, GPU name) of an env: what numbers are comparable across (the GPU name is None on CPU)."""
    e = DeviceEnv.of(env)
    return e.device, e.gpu


def device_of(row) -> tuple[str | None, str | None]:
    """The model (device, GPU name) a row (ledger/rows.py) was measured on."""
    return model(row.env or {})


def device_name(env: dict) -> str | None:
    """A device's name for people: the GPU model, else the device kind ("cpu")."""
    e = DeviceEnv.of(env)
    return e.gpu or e.device


def ceilings_name(row) -> str:
    """The name of the device a ceilings row (ledger.rows.CeilingsRow) was measured on: its
    fingerprint's model name."""
    return str(Fingerprint.of(row.fingerprint or {}).name or row.device)


def same_gpu_model(env: dict, fingerprint: dict) -> bool:
    """Whether an env's GPU is the model a ceilings fingerprint names (never on CPU: a CPU
    model name in a fingerprint does not identify the host's load)."""
    e, f = DeviceEnv.of(env), Fingerprint.of(fingerprint)
    return f.device == "cuda" and e.device == "cuda" and e.gpu == f.name


def device_key(env: dict) -> str:
    """The name a device is locked under: its GPU UUID (stable across CUDA_VISIBLE_DEVICES
    renumbering), else its index, else ``cpu``."""
    e = DeviceEnv.of(env)
    if e.device == "cuda":
        ident = e.gpu_uuid or f"cuda-index-{e.gpu_index}"
    else:
        ident = "cpu"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", ident)


# The fields that name one device instance (issue 48, item 3): the host (hashed) and the card's
# UUID and board serial (null on the CPU, and where NVML gives none).
INSTANCE_FIELDS = ("host", "gpu_uuid", "gpu_serial")


def instance(env: dict) -> dict:
    """The device instance an env was measured on: its host and card (``INSTANCE_FIELDS``; a
    field the env does not hold is null)."""
    return {f: env.get(f) for f in INSTANCE_FIELDS}


def instance_key(env: dict) -> tuple:
    """``instance`` as a key: (host, card) with the card its UUID, else its serial (None: the
    CPU, or a card NVML named neither way). Two rows are of one instance when their keys are
    equal."""
    e = DeviceEnv.of(env)
    return e.host, e.card


def card_told(env: dict) -> bool:
    """Whether an env tells its device instance apart from another of its host: always on the
    CPU (the host is the instance), on a GPU only with a UUID or a serial."""
    e = DeviceEnv.of(env)
    return e.device != "cuda" or bool(e.card)


def instance_text(inst: dict) -> str:
    """``host machine-id:1a2b… card GPU-8f3c…`` (the host alone on the CPU), for people."""
    e = DeviceEnv.of(inst)
    host, card = str(e.host or "?"), e.card
    return f"host {host}" + (f" card {card}" if card else "")


def stack_differs(a: dict, b: dict) -> list[str]:
    """The STACK_FIELDS two stacks (``stack``) both record with different values: a version one
    of them never recorded is no difference (as ``outcomes.places`` reads them)."""
    return [f for f in STACK_FIELDS if f in a and f in b and a[f] != b[f]]
