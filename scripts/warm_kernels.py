"""Fill Triton's on-disk kernel cache for a registered line, in parallel, before its sweep.

A sweep compiles each Triton kernel once per specialization (dtype, causal, head_dim, the
autotune key, integer divisibility) and the flash kernel's autotuner compiles every
candidate config: at the flash-h200 grid and its boundary seq_lens that is ~40 compiles of
~20 s, serialized inside the sweep. Here one worker process per (kernel, config) calls the
kernel once on that config's own shapes (so the specialization is the sweep's), and the
sweep then loads the cached binaries. Nothing is timed or recorded: this only compiles.

    python3 scripts/warm_kernels.py LINE [--workers N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Kernels whose first call compiles (everything else compiles nothing, or through cupy's cache).
TRITON_KERNELS = ("triton_flash", "triton_decode")


def _warm(task) -> tuple[str, str, float, str | None]:
    name, cfg = task
    t0 = time.perf_counter()
    try:
        import torch

        from harness.workloads.inputs import make_inputs
        from kernels import get_kernel

        q, k, v = make_inputs(cfg, 0, "normal", "cuda")
        out = torch.empty_like(q)
        get_kernel(name).fn(q, k, v, out, causal=cfg.causal, scale=cfg.scale)
        torch.cuda.synchronize()
        return name, cfg.key(), time.perf_counter() - t0, None
    except Exception as exc:  # reported, and the sweep will report it again with its gate
        return name, cfg.key(), time.perf_counter() - t0, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("line")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    args = ap.parse_args()

    from harness.governance.registration import load
    from harness.workloads.inputs import boundary_configs
    from kernels import get_kernel

    reg = load(ROOT / "registrations" / f"{args.line}.toml")
    names = [n for n in (reg.baseline, *reg.candidates) if n in TRITON_KERNELS]
    tasks = []
    for name in names:
        spec = get_kernel(name)
        seen = set()
        for cfg in reg.configs:
            for c in (cfg, *boundary_configs(cfg)):
                if c.key() not in seen and spec.config_reason(c) is None:
                    seen.add(c.key())
                    tasks.append((name, c))
    print(f"warming {len(tasks)} (kernel, config) pairs of {args.line} with {args.workers} workers", flush=True)
    t0 = time.perf_counter()
    import multiprocessing as mp

    failed = 0
    with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool:
        for fut in as_completed([pool.submit(_warm, t) for t in tasks]):
            name, key, secs, err = fut.result()
            failed += err is not None
            print(f"  {name} {key}: {secs:.1f}s" + (f"  FAILED {err}" if err else ""), flush=True)
    print(f"warmed in {time.perf_counter() - t0:.0f}s, {failed} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
