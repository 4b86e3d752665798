"""Which executor a sweep runs on, from its options: inline, local workers (one per GPU or
CPU slot), or Ray actors; each bad combination refused with the option to drop."""

from __future__ import annotations

from harness.errors import UserError
from harness.execution.inline import InlineExecutor
from harness.execution.ray_executor import RayExecutor
from harness.execution.workers import LocalPool


def gpu_slots(spec: str | None) -> list[str]:
    """``--gpus``: the CUDA_VISIBLE_DEVICES entry of each worker, from indices into what this
    process sees ("0,1", "all"; default one GPU)."""
    import os

    import torch

    seen = [v.strip() for v in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if v.strip()] \
        if os.environ.get("CUDA_VISIBLE_DEVICES") is not None else None
    count = torch.cuda.device_count()
    if spec is None or spec == "all":
        picked = list(range(count)) if spec == "all" else [0]
    else:
        try:
            picked = [int(v) for v in spec.split(",") if v.strip()]
        except ValueError:
            raise UserError(f"--gpus {spec!r}: give GPU indices like 0,1 or 'all'") from None
        if not picked or len(set(picked)) != len(picked):
            raise UserError(f"--gpus {spec!r}: give each GPU index once, like 0,1, or 'all'")
    bad = [i for i in picked if not 0 <= i < count]
    if bad or not picked:
        raise UserError(f"--gpus {spec}: this process sees {count} GPU(s) (indices 0..{count - 1}): pick among them")
    return [seen[i] if seen is not None else str(i) for i in picked]


def make_executor(device: str, *, inline: bool = False, gpus: str | None = None, workers: int = 1,
                  executor: str = "local", address: str | None = None):
    """The executor a sweep runs on: inline (debugging), one worker per GPU / CPU slot, or
    one Ray actor per GPU of a cluster (``executor="ray"``)."""
    if executor not in ("local", "ray"):
        raise UserError(f"--executor {executor!r}: use local or ray")
    if address is not None and executor != "ray":
        raise UserError("--address names a Ray cluster: add --executor ray (or drop --address)")
    if executor == "ray":
        if inline or gpus is not None:
            raise UserError("--executor ray runs one actor per GPU of the cluster: drop --inline/--gpus")
        if device == "cuda" and workers != 1:
            raise UserError("--workers is for CPU sweeps: on a Ray cluster every GPU gets one actor")
        if workers < 1:
            raise UserError(f"--workers {workers}: give at least 1")
        return RayExecutor(device, address=address, workers=workers)
    if inline:
        if gpus is not None or workers != 1:
            raise UserError("--inline runs in this process, on one device: drop --gpus/--workers "
                            "(pick the GPU with CUDA_VISIBLE_DEVICES)")

        return InlineExecutor(device)

    if device == "cuda":
        if workers != 1:
            raise UserError("--workers is for CPU sweeps: on GPUs use --gpus (one worker per GPU)")
        return LocalPool(device, gpu_slots(gpus))
    if gpus is not None:
        raise UserError(f"--gpus {gpus} but this sweep runs on the CPU: drop --gpus (or run on a GPU machine)")
    if workers < 1:
        raise UserError(f"--workers {workers}: give at least 1")
    return LocalPool(device, [None] * workers)
