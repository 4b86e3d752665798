#!/usr/bin/env python
"""How triton_decode should cut the KV cache at small batch: split counts timed by the harness.

For each decode shape, every split count in a list (plus the shipped plan and sdpa_cudnn as
a yardstick) is first checked against the float64 reference (bench_decode.reference, the
same gate as scripts/bench_decode.py), then all of them are timed together as arms of one
``harness.measurement.timing.measure`` call in hot mode: interleaved rounds, a ring of KV
copies ≥ 4 × L2 so no call finds its cache in L2, no L2 flush (a flush leaves the L2 full
of dirty lines whose write-back the next call pays for), NVML clocks polled throughout.
The same arms are then timed in graph mode (one CUDA graph of K calls per sample).

``--tune`` times, at the small batches where the kernel is furthest from the copy
yardstick, the shipped plan against launch variants: two launches with and without
programmatic dependent launch, and one launch (the combine fused into the split kernel).
(At 1fe5d2f it also timed the fused path's tile, warp, stage and split-count neighbours:
none won; docs/benchmarks.md.)

Writes ``decode_splits.csv`` and ``decode_splits.md`` (``decode_tune.*`` with --tune) under
$OUT (else the current directory).

Usage (GPU machine, repo root): PYTHONUNBUFFERED=1 python scripts/explore_decode_splits.py [--quick] [--tune]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (_ROOT, os.path.join(_ROOT, "scripts")):
    if p not in sys.path:
        sys.path.insert(0, p)

from bench_decode import TOLERANCE, check, reference, rel_err  # noqa: E402

# (batch, heads, kv_heads, seq_len, head_dim, dtype): seed 004's single-sequence decode
# first, then small batches, then two of the decode-h200 line's shapes as a check that a
# new plan does not lose what the line measured.
SHAPES = [
    (1, 32, 8, 8192, 128, "float16"), (1, 32, 8, 32768, 128, "float16"), (1, 32, 8, 131072, 128, "float16"),
    (2, 32, 8, 32768, 128, "float16"), (4, 32, 8, 8192, 128, "float16"), (4, 32, 8, 32768, 128, "float16"),
    (16, 32, 8, 8192, 128, "float16"), (16, 32, 8, 32768, 128, "float16"), (32, 32, 8, 8192, 128, "float16"),
    (64, 32, 8, 8192, 128, "float16"),
]
# --tune: the small-batch shapes below 0.85 in decode-small-h200, one that met it, and a
# decode-h200 shape as a check that a variant does not lose at large batch.
TUNE_SHAPES = [
    (1, 32, 8, 8192, 128, "float16"), (1, 32, 8, 32768, 128, "float16"), (2, 32, 8, 8192, 128, "float16"),
    (4, 32, 8, 8192, 128, "float16"), (2, 32, 8, 32768, 128, "float16"), (16, 32, 8, 8192, 128, "float16"),
]
# --tune variants beside the shipped plan: decode() keyword overrides, at the plan's split count.
TUNE = {
    "two_launch": {"fused": False, "pdl": False}, "pdl": {"fused": False, "pdl": True},
    "pdl_st4": {"fused": False, "pdl": True, "num_stages": 4},
    "fused": {"fused": True, "pdl": False}, "fused_pdl": {"fused": True, "pdl": True},
}
# Split counts tried per shape beside the shipped plan (before rounding to whole tiles;
# duplicates after rounding dropped). The first run (c4eff61) tried 21 counts up to 512.
SPLITS = (1, 2, 4, 8, 16, 24, 32, 47, 64, 128)
# Keys per split below this are not tried (the partials then outweigh the keys).
MIN_KEYS = 128
# Plans of more waves of resident programs than this are not tried.
MAX_WAVES = 8
# A 20 × (few µs) arm set: the harness defaults would spend minutes; these keep ~5 s/shape.
POLICY = {"mode": "hot", "warmup_ms": 100, "min_samples": 12, "max_samples": 200, "min_time_ms": 30,
          "noise_target": 0.01, "timeout_s": 15}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tune", action="store_true", help="time launch variants (PDL, one launch) at small batch")
    args = ap.parse_args()
    import torch

    from harness.measurement.ceilings import measure_ceilings
    from harness.measurement.timing import TimingPolicy, device_l2_bytes, measure, rotation_slots
    from kernels import load_kernels
    from kernels._triton_decode_impl import decode
    from kernels.triton_decode import BLOCK_N_FOR_D, RESIDENT_PER_SM, cut, plan, sm_count

    out_dir = os.environ.get("OUT") or "."
    os.makedirs(out_dir, exist_ok=True)
    specs = load_kernels()
    ceil = measure_ceilings("cuda")
    l2 = device_l2_bytes("cuda")
    sms = sm_count()
    rows = []
    shapes = TUNE_SHAPES if args.tune else SHAPES
    for shape in (shapes[:2] if args.quick else shapes):  # --quick: the first two
        b, h, hkv, n, d, dtype = shape
        dt = getattr(torch, dtype)
        scale = d ** -0.5
        kv_bytes = 2 * b * hkv * n * d * dt.itemsize
        copies = rotation_slots(kv_bytes, l2)  # the harness's hot-mode ring: ≥ 4 × L2
        gen = torch.Generator(device="cuda").manual_seed(n + b)
        q = torch.randn((b, h, 1, d), generator=gen, device="cuda").to(dt)
        ring = [(torch.randn((b, hkv, n, d), generator=gen, device="cuda").to(dt),
                 torch.randn((b, hkv, n, d), generator=gen, device="cuda").to(dt)) for _ in range(copies)]
        ref = reference(q, *ring[0], scale)
        block_n = BLOCK_N_FOR_D[d]
        shipped, _, _ = plan(b, hkv, n, d, sms)
        variants = {}  # name -> decode() keyword overrides; "num_splits" as launched
        if args.tune:
            variants["shipped"] = {"num_splits": shipped}
            for name, kw in TUNE.items():
                variants[name] = {**kw, "num_splits": shipped}
        else:
            for s in SPLITS + (shipped,):
                actual, chunk = cut(n, s, block_n)
                if {"num_splits": actual} in variants.values() or (s != shipped and (
                        (chunk < MIN_KEYS and actual > 1) or b * hkv * actual > MAX_WAVES * RESIDENT_PER_SM * sms)):
                    continue
                variants[f"s{actual}"] = {"num_splits": actual}
            # the shipped plan without programmatic dependent launch: what LAUNCH_PDL buys
            variants[f"s{shipped}_nopdl"] = {"num_splits": shipped, "pdl": False}
        arms, why = {}, {}
        for name, kw in variants.items():
            def fn(q_, k_, v_, o_, *, causal, scale, kw=kw):
                decode(q_, k_, v_, o_, scale, **kw)
            err, out = check(fn, q, ring, ref, scale)
            if not err < TOLERANCE[dtype]:
                why[name] = f"rel err {err:.3g} >= {TOLERANCE[dtype]:.3g}"
                continue

            def arm(slot, kw=kw, out=out):
                decode(q, *ring[slot % copies], out, scale, **kw)
            arms[name] = arm
        cud = specs["sdpa_cudnn"]
        o_c = torch.full_like(q, float("nan"))
        cud.fn(q, *ring[0], o_c, causal=False, scale=scale)
        torch.cuda.synchronize()
        if rel_err(o_c, ref) < TOLERANCE[dtype]:
            arms["sdpa_cudnn"] = lambda slot: cud.fn(q, *ring[slot % copies], o_c, causal=False, scale=scale)
        # Yardstick at this size: copying the same K and V (two launches, as decode's split +
        # combine) reads and writes 2 × kv_bytes; how near the 2 GiB copy ceiling a transfer
        # this small gets bounds what any decode kernel can reach here.
        dst = [(torch.empty_like(ring[0][0]), torch.empty_like(ring[0][1])) for _ in range(copies)]

        def copy_kv(slot):
            dk, dv = dst[slot % copies]
            dk.copy_(ring[slot % copies][0])
            dv.copy_(ring[slot % copies][1])
        arms["copy_kv"] = copy_kv
        for mode in ("hot", "graph"):
            t0 = time.perf_counter()
            m = measure(arms, n_slots=copies, policy=TimingPolicy.from_mapping({**POLICY, "mode": mode}),
                        device="cuda")
            wall = time.perf_counter() - t0
            clk = m.clock
            for name in arms:
                med = m.arms[name].stats.median
                moved = 2 * kv_bytes if name == "copy_kv" else kv_bytes  # copy: read + write
                gbps = moved / (med * 1e-3) / 1e9
                splits = variants[name]["num_splits"] if name in variants else None
                rows.append({"B": b, "H": h, "Hkv": hkv, "L": n, "D": d, "dtype": dtype, "mode": mode,
                             "arm": name, "splits": splits, "programs": b * hkv * splits if splits else None,
                             "shipped": name == "shipped" or (not args.tune and splits == shipped
                                                                  and "pdl" not in variants[name]),
                             "us": med * 1e3, "gbps": gbps, "frac": gbps / ceil.copy_gbps,
                             "rounds": len(m.rounds), "stop": m.stop_reason,
                             "mean_mhz": clk.mean_mhz if clk else None, "wall_s": wall})
        for name, reason in why.items():
            rows.append({"B": b, "H": h, "Hkv": hkv, "L": n, "D": d, "dtype": dtype, "mode": "-", "arm": name,
                         "splits": variants[name]["num_splits"], "stop": reason})
        best = max((r for r in rows if r.get("L") == n and r.get("B") == b and r.get("frac") and r["arm"] not in ("sdpa_cudnn", "copy_kv")
                    and r["mode"] == "hot"), key=lambda r: r["frac"], default=None)
        print(f"{shape}: {len(arms)} arms, shipped s{shipped}, best hot {best and best['arm']} "
              f"{best and round(best['frac'], 3)}", flush=True)
        arms = ring = q = ref = dst = None  # free this shape's caches before the next
        torch.cuda.empty_cache()

    cols = ["B", "H", "Hkv", "L", "D", "dtype", "mode", "arm", "splits", "programs", "shipped", "us", "gbps", "frac",
            "rounds", "stop", "mean_mhz", "wall_s"]
    stem = "decode_tune" if args.tune else "decode_splits"
    with open(os.path.join(out_dir, stem + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    lines = [f"# triton_decode split counts — copy ceiling {ceil.copy_gbps:.0f} GB/s, {sms} SMs",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r.get(c):.4g}" if isinstance(r.get(c), float) else str(r.get(c, ""))
                                       for c in cols) + " |")
    text = "\n".join(lines)
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
