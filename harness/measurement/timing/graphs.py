"""CUDA-graph capture for graph mode: per-slot graphs to warm up with, then per-start-slot
chains of K calls so one sample is one graph launch (torch imported lazily)."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from harness.errors import UserError
from harness.measurement.timing.policy import GRAPH_MAX_REPLAYS

GRAPH_TARGET_SAMPLE_MS = 0.2       # CUDA events resolve ~0.5 µs: a sample of ≥ 200 µs keeps that < 0.3%
GRAPH_SIDE_WARMUP_CALLS = 3        # calls on a side stream before capture (torch CUDA-graph docs)


def _not_capturable(name: str, exc: RuntimeError) -> UserError:
    return UserError(f"arm '{name}' cannot be captured into a CUDA graph ({exc}): "
                     f"time it with mode 'hot' or 'cold' instead")


def capture_graphs(arms: Mapping[str, Callable[[int], None]], names: Sequence[str], n_slots: int,
                   device: str) -> dict[str, tuple]:
    """One CUDA graph per arm × slot, after a side-stream warm-up (as the torch docs require)."""
    import torch

    dev = torch.device(device)
    pool = torch.cuda.graph_pool_handle()
    side = torch.cuda.Stream(device=dev)
    graphs: dict[str, tuple] = {}
    for name in names:
        fn = arms[name]
        try:
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                for slot in range(n_slots):
                    for _ in range(GRAPH_SIDE_WARMUP_CALLS if slot == 0 else 1):
                        fn(slot)
            torch.cuda.current_stream(dev).wait_stream(side)
            torch.cuda.synchronize(dev)
            per_slot = []
            for slot in range(n_slots):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    fn(slot)
                per_slot.append(g)
            graphs[name] = tuple(per_slot)
        except RuntimeError as exc:
            raise _not_capturable(name, exc) from exc
    torch.cuda.synchronize(dev)
    return graphs


def capture_chains(arms: Mapping[str, Callable[[int], None]], names: Sequence[str], n_slots: int,
                   starts: Sequence[int], replays: int, device: str) -> dict[str, dict[int, Any]]:
    """Per arm and start slot, ONE graph of ``replays`` consecutive calls (slots start, start+1, ...).

    A sample is then one graph launch, not ``replays`` launches: separate graphs leave a gap
    of GPU time between launches that inflates the sample and depends on capture order.
    Arms are already warm (prime, warm-up), so no side-stream warm-up is needed here.
    """
    import torch

    pool = torch.cuda.graph_pool_handle()
    chains: dict[str, dict[int, Any]] = {}
    for name in names:
        fn = arms[name]
        chains[name] = {}
        for start in starts:
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g, pool=pool):
                    for j in range(replays):
                        fn((start + j) % n_slots)
            except RuntimeError as exc:
                raise _not_capturable(name, exc) from exc
            chains[name][start] = g
    torch.cuda.synchronize(torch.device(device))
    return chains


def auto_replays(warm: Mapping[str, list[float]]) -> int:
    """K so that a graph sample of the fastest arm lasts ≥ GRAPH_TARGET_SAMPLE_MS."""
    import numpy as np

    meds = [float(np.median(v)) for v in warm.values() if v]
    fastest = min(meds) if meds else 0.0
    if fastest <= 0:
        return GRAPH_MAX_REPLAYS
    return max(1, min(GRAPH_MAX_REPLAYS, math.ceil(GRAPH_TARGET_SAMPLE_MS / fastest)))
