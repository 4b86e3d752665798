#!/usr/bin/env python
"""Decode attention on one GPU: correctness vs float64, then timing on rotating KV caches.

For each shape (one query token per sequence, KV cache of L tokens):
1. every kernel passes the harness's correctness gate first (``harness.measurement.correctness.gate``:
   float64 reference, poisoned outputs, every seed and input family, boundary configs) with the
   tolerances, seeds and families of the registered decode line (registrations/decode-h200.toml,
   ``--registration``); one that fails is not timed. This script has no criterion of its own;
2. ``triton.testing.do_bench`` (median, CUDA events, L2 flushed before every call) times it
   on a ring of KV caches that together exceed ROTATE_L2_MULTIPLE × L2, so no call finds its
   K/V in L2 (a single cache that large is used alone);
3. the effective KV bandwidth (K+V bytes / time) is reported with its fraction of the copy
   bandwidth measured in the same run (harness.measurement.ceilings, bytes read + written).

``--sweep`` also times triton_decode's tile/warp/stage/split variants (each checked first);
``programs_per_sm`` only moves the large-batch plan (B·Hkv > 2 × SMs; the row shows the
splits launched): small-batch split counts are explored by research/explore_decode_splits.py.
The figures are not ledger-backed: a decision needs a registered line (`bench sweep`).
Writes ``bench_decode.csv``, ``bench_decode.md``, ``ceilings.json`` (and
``triton_sweep.csv``) under ``--out`` (default: $OUT, else the current directory).

Usage (on the GPU machine, repo root): PYTHONUNBUFFERED=1 python3 -m research.bench_decode [--sweep] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import sys
import time
import traceback

# The KV ring must hold this many L2s, so the timed call always streams from HBM.
ROTATE_L2_MULTIPLE = 4
# Fallback when torch does not report the L2 size (an H200 has 60 MB).
DEFAULT_L2_BYTES = 60 * 1024**2
# The registered line whose [correctness] section gates every kernel before it is timed.
REGISTRATION = "registrations/decode-h200.toml"
DO_BENCH_WARMUP_MS = 25
DO_BENCH_REP_MS = 100

KERNELS = ("triton_decode", "cublas_stack", "torch_stack", "sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn")
# (batch, heads, kv_heads, seq_len, head_dim, dtype); the brief's target: B 16..64, H 32, Hkv 8, D 128, L >= 8k.
SHAPES = [
    (16, 32, 8, 8192, 128, "float16"), (32, 32, 8, 8192, 128, "float16"), (64, 32, 8, 8192, 128, "float16"),
    (16, 32, 8, 32768, 128, "float16"), (64, 32, 8, 32768, 128, "float16"), (32, 32, 8, 8192, 128, "bfloat16"),
    (32, 32, 8, 8192, 64, "float16"), (1, 32, 8, 32768, 128, "float16"), (16, 32, 8, 2048, 128, "float16"),
    (4, 32, 8, 4096, 128, "float16"),
]
QUICK_SHAPES = [SHAPES[0], SHAPES[3], SHAPES[-1]]
# cuda_naive_decode is slow on purpose: checked and timed on the small shapes only.
NAIVE_MAX_KV_BYTES = 256 * 1024**2
SWEEP_SHAPES = [(16, 32, 8, 8192, 128, "float16"), (16, 32, 8, 32768, 128, "float16"),
                (64, 32, 8, 32768, 128, "float16")]
SWEEP = [  # block_n, num_warps, num_stages, programs_per_sm
    (64, 4, 3, 6), (64, 4, 2, 6), (64, 4, 4, 6), (64, 4, 5, 6), (32, 4, 3, 6), (32, 4, 4, 6),
    (128, 4, 2, 6), (128, 4, 3, 6), (128, 8, 3, 6), (64, 8, 3, 6), (64, 2, 3, 6), (64, 4, 3, 3),
    (64, 4, 3, 12), (64, 4, 3, 24), (64, 4, 4, 12)]


def config(shape):
    from harness import Config

    b, h, hkv, n, d, dtype = shape
    return Config(workload="decode", batch=b, heads=h, kv_heads=hkv, seq_len=n, head_dim=d, dtype=dtype, causal=False)


def gated(spec, shape, reg) -> tuple[bool, str]:
    """The harness's correctness gate of ``spec`` at ``shape`` under ``reg``'s [correctness]:
    (passed, what the table shows: the worst tolerance ratio, or the failure's tag and reason)."""
    from harness import gate, get_workload

    cfg = config(shape)
    g = gate(spec, cfg, workload=get_workload(reg.workload), seeds=reg.seeds, families=reg.families, atol=reg.atol[cfg.dtype], rtol=reg.rtol[cfg.dtype],
             device="cuda", min_pass_rate=reg.min_pass_rate)
    worst = ((g.to_row().get("worst") or {}).get("figures") or {}).get("tolerance_ratio")
    shown = f"worst {worst:.3g} of tolerance" if isinstance(worst, (int, float)) else "passed"
    return g.passed, shown if g.passed else f"gate [{g.tag}]: {str(g.reason)[:160]}"


def make_inputs(shape, l2_bytes, seed):
    import torch

    b, h, hkv, n, d, dtype = shape
    dt = getattr(torch, dtype)
    kv_bytes = 2 * b * hkv * n * d * dt.itemsize
    copies = max(1, math.ceil(ROTATE_L2_MULTIPLE * l2_bytes / kv_bytes))
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((b, h, 1, d), generator=gen, device="cuda").to(dt)
    ring = []
    for _ in range(copies):
        k = torch.randn((b, hkv, n, d), generator=gen, device="cuda", dtype=torch.float32).to(dt)
        v = torch.randn((b, hkv, n, d), generator=gen, device="cuda", dtype=torch.float32).to(dt)
        ring.append((k, v))
    return q, ring, kv_bytes


def bench(fn, q, ring, out, scale):
    """Median µs of fn over the KV ring (do_bench flushes L2 before every call too)."""
    import triton

    state = {"i": 0}

    def call():
        k, v = ring[state["i"] % len(ring)]
        state["i"] += 1
        fn(q, k, v, out, causal=False, scale=scale)

    return 1e3 * triton.testing.do_bench(call, warmup=DO_BENCH_WARMUP_MS, rep=DO_BENCH_REP_MS, return_mode="median")


def fmt_row(r):
    return {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()}


def write_table(path_csv, path_md, rows, title):
    if not rows:
        return
    cols = list(rows[0].keys())
    with open(path_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    with open(path_md, "w") as f:
        f.write(f"## {title}\n\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for r in rows:
            f.write("| " + " | ".join(str(fmt_row(r)[c]) for c in cols) + " |\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--sweep", action="store_true", help="also time triton_decode tuning variants")
    ap.add_argument("--quick", action="store_true", help="three shapes only")
    ap.add_argument("--registration", default=REGISTRATION, help="the line whose [correctness] gates every kernel")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("bench_decode needs a CUDA GPU", file=sys.stderr)
        return 2
    from harness import load_kernels, load_registration, measure_ceilings

    reg = load_registration(args.registration)

    os.makedirs(args.out, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES
    print(f"device {props.name}, {props.multi_processor_count} SMs, L2 {l2 / 2**20:.0f} MiB, torch {torch.__version__}")
    t0 = time.time()
    ceil = measure_ceilings("cuda")
    copy = ceil.copy_gbps
    with open(os.path.join(args.out, "ceilings.json"), "w") as f:
        json.dump(ceil.to_row(), f, indent=1)
    print(f"ceilings ({time.time() - t0:.1f}s): copy {copy:.0f} GB/s (read+write); matmul TFLOP/s "
          + ", ".join(f"{k} {v:.1f}" for k, v in ceil.matmul_tflops.items()))

    ks = load_kernels()
    rows = []
    shapes = QUICK_SHAPES if args.quick else SHAPES
    for si, shape in enumerate(shapes):
        b, h, hkv, n, d, dtype = shape
        scale = d ** -0.5
        q, ring, kv_bytes = make_inputs(shape, l2, seed=1000 + si)
        out = torch.empty_like(q)
        names = list(KERNELS) + (["cuda_naive_decode"] if kv_bytes <= NAIVE_MAX_KV_BYTES else [])
        print(f"\nB={b} H={h} Hkv={hkv} L={n} D={d} {dtype}: KV {kv_bytes / 1e6:.0f} MB, ring of {len(ring)}")
        for name in names:
            spec = ks[name]
            row = {"kernel": name, "batch": b, "heads": h, "kv_heads": hkv, "seq_len": n, "head_dim": d,
                   "dtype": dtype, "kv_mb": kv_bytes / 1e6, "gate": "", "ok": False, "us": math.nan,
                   "kv_gbps": math.nan, "frac_copy": math.nan, "note": ""}
            if dtype not in spec.dtypes:
                row["note"] = f"no {dtype}"
                rows.append(row)
                continue
            try:
                row["ok"], row["gate"] = gated(spec, shape, reg)
                if row["ok"]:
                    us = bench(spec.fn, q, ring, out, scale)
                    row["us"] = us
                    row["kv_gbps"] = kv_bytes / (us * 1e-6) / 1e9
                    row["frac_copy"] = row["kv_gbps"] / copy
            except Exception as exc:  # record and go on: one broken backend must not hide the rest
                row["note"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                if not isinstance(exc, RuntimeError):
                    traceback.print_exc()
            rows.append(row)
            print(f"  {name:18s} ok {row['ok']!s:5s} {row['us']:9.1f} us "
                  f"{row['kv_gbps']:7.0f} GB/s {row['frac_copy']:6.1%} {row['gate']} {row['note']}")
        del q, ring, out
        torch.cuda.empty_cache()
    write_table(os.path.join(args.out, "bench_decode.csv"), os.path.join(args.out, "bench_decode.md"), rows,
                f"decode on {props.name}, copy bandwidth {copy:.0f} GB/s")

    if args.sweep:
        from bench_kernels.triton_decode import decode

        sweep_rows = []
        for si, shape in enumerate(SWEEP_SHAPES):
            b, h, hkv, n, d, dtype = shape
            scale = d ** -0.5
            q, ring, kv_bytes = make_inputs(shape, l2, seed=2000 + si)
            out = torch.empty_like(q)
            print(f"\nsweep B={b} L={n}:")
            for bn, warps, stages, pps in SWEEP:
                def fn(q_, k_, v_, o_, *, causal, scale, bn=bn, warps=warps, stages=stages, pps=pps):
                    return decode(q_, k_, v_, o_, scale, block_n=bn, num_warps=warps, num_stages=stages,
                                       programs_per_sm=pps)
                row = {"batch": b, "seq_len": n, "block_n": bn, "warps": warps, "stages": stages,
                       "programs_per_sm": pps, "splits": math.nan, "gate": "", "us": math.nan,
                       "kv_gbps": math.nan, "frac_copy": math.nan, "note": ""}
                try:
                    k0, v0 = ring[0]
                    row["splits"] = decode(q, k0, v0, out, scale, block_n=bn, num_warps=warps,
                                                num_stages=stages, programs_per_sm=pps)
                    base = ks["triton_decode"]
                    variant = dataclasses.replace(base, name=f"triton_decode[{bn},{warps},{stages},{pps}]", fn=fn)
                    ok, row["gate"] = gated(variant, shape, reg)
                    if ok:
                        us = bench(fn, q, ring, out, scale)
                        row.update(us=us, kv_gbps=kv_bytes / (us * 1e-6) / 1e9)
                        row["frac_copy"] = row["kv_gbps"] / copy
                    else:
                        row["note"] = "incorrect"
                except Exception as exc:
                    row["note"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                sweep_rows.append(row)
                print(f"  bn {bn:3d} w {warps} st {stages} pps {pps:2d} splits {row['splits']} {row['gate']} "
                      f"{row['us']:9.1f} us {row['kv_gbps']:7.0f} GB/s {row['frac_copy']:6.1%} {row['note']}")
            del q, ring, out
            torch.cuda.empty_cache()
        write_table(os.path.join(args.out, "triton_sweep.csv"), os.path.join(args.out, "triton_sweep.md"),
                    sweep_rows, "triton_decode variants")

    print()
    with open(os.path.join(args.out, "bench_decode.md")) as f:
        print(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
