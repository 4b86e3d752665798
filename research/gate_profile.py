"""Where a gate's seconds go (issue 32): the float64 gate of one config, warmed, under cProfile.

    PYTHONUNBUFFERED=1 python3 -m research.gate_profile [--seq-len 4096] [--dtype float16] \
        [--kernels cublas_stack,triton_flash] [--registration flash-h200-v2.toml] [--out DIR]

The config is flash-h200-v2's shape (batch 8, 16 heads, head_dim 128, non-causal) at the
given seq_len. The gate runs once untimed (compiling, autotuning, cuDNN plans: a sweep pays
those once per shape and process), then once timed under cProfile. It writes
``gate_profile_N.txt`` (the gate's seconds per kernel, the float64 references, and the profile's
top functions by their own time and by cumulative time) under ``--out`` (default: $OUT, else
.). On a GPU a host function that waits for the device (``synchronize``, ``item``,
``tolist``) holds the device's time: read those lines as the device work queued before them.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--kernels", default="cublas_stack,triton_flash,sdpa_cudnn")
    ap.add_argument("--registration", default="flash-h200-v2.toml",
                    help="whose [correctness] (seeds, families, tolerances) the gate runs under")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--cuda-ops", action="store_true",
                    help="on a GPU, a third gate under torch.profiler: the device time per operator")
    a = ap.parse_args(argv)

    import torch

    from harness import BoundaryMemo, Config, GatePolicy, gate_kernels, get_kernel, get_workload, load_kernels, load_registration

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    load_kernels()
    specs = [get_kernel(n) for n in a.kernels.split(",")]
    cfg = Config("attention", a.batch, 16, 16, a.seq_len, 128, a.dtype, a.causal)
    reg = load_registration(Path(__file__).resolve().parents[1] / "registrations" / a.registration)
    pol = GatePolicy(reg.seeds, reg.atol[a.dtype], reg.rtol[a.dtype], families=reg.families, device=device)
    memo = BoundaryMemo()  # the timed run reuses the boundary cases, as a sweep's later configs do
    t0 = time.perf_counter()
    gate_kernels(specs, cfg, pol, workload=get_workload(reg.workload), memo=memo)
    warm = time.perf_counter() - t0
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    run = gate_kernels(specs, cfg, pol, workload=get_workload(reg.workload), memo=memo)
    prof.disable()
    wall = time.perf_counter() - t0
    lines = [f"config {cfg.key()} on {device}; {a.registration}'s seeds {list(reg.seeds)}; first (warming) gate {warm:.2f} s; "
             f"timed gate {wall:.3f} s, float64 references {run.reference_seconds:.3f} s"]
    for name, res in run.results.items():
        lines.append(f"  {name}: {res.seconds:.3f} s, passed {res.passed}, {len(res.reports)} reports")
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(35)
        lines += [f"\n## by {key}", buf.getvalue()]
    if a.cuda_ops and device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
            gate_kernels(specs, cfg, pol, workload=get_workload(reg.workload), memo=memo)
        lines += ["\n## device time per operator (torch.profiler)",
                  tp.key_averages().table(sort_by="self_cuda_time_total", row_limit=40)]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gate_profile_{a.seq_len}.txt").write_text("\n".join(lines))
    print("\n".join(lines[: 2 + len(run.results)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
