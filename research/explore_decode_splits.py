#!/usr/bin/env python
"""How triton_decode should cut the KV cache at small batch: split counts timed by the harness.

For each decode shape, every split count in a list (plus the shipped plan, and as
yardsticks sdpa_cudnn and cuda_cluster_decode: OTHER_KERNELS) first passes the harness's correctness gate
(the registered decode line's tolerances, through research/bench_decode.py's `gated`), then
all of them are timed together as arms of one
``harness.measurement.timing.measure`` call in hot mode: interleaved rounds, a ring of KV
copies ≥ 4 × L2 so no call finds its cache in L2, no L2 flush (a flush leaves the L2 full
of dirty lines whose write-back the next call pays for), NVML clocks polled throughout.
The same arms are then timed in graph mode (one CUDA graph of K calls per sample).

``--tune`` times, at the small batches where the kernel is furthest from the copy
yardstick, the shipped plan against variants of itself (TUNE: the two-pass combine, 4
stages, one launch with PDL, twice the splits in 2 stages). Earlier runs timed two
launches with and without PDL (61651b6) and the one-launch path's tile, warp, stage and
split-count neighbours (1fe5d2f); none beat the shipped plan (docs/measurement.md#small-batches-the-split-plan-researchexplore_decode_splitspy).

``--timeline`` records per-program timelines (TIMELINE_CASES), raw, in
``decode_timeline_raw.csv`` beside the medians in ``decode_timeline.csv``.

``--floor`` asks what any kernel could reach at the small calls: beside the shipped plan
(and 0.75× / 1.5× its splits) it times a read-only yardstick, a Triton kernel that only
sums K and V (one launch; FLOOR_READS programs per SM, load steps, stages; its sum
checked in float64), and it records a per-program timeline of the shipped kernel (%globaltimer at each program's start
and end, split and combine, between two stamp kernels) in ``decode_timeline.csv``.

Writes ``decode_splits.csv`` and ``decode_splits.md`` (``decode_tune.*`` with --tune,
``decode_floor.*`` with --floor) under $OUT (else the current directory).

``--solo`` times the shipped plan twice beside sdpa_cudnn and the copy, one split count
among the arms: elsewhere each decode arm of another split count evicts the cached
scratch, and the next call reallocates it inside its timed window (hot mode).

The figures are not ledger-backed: a decision needs a registered line (`bench sweep`).

Usage (GPU machine, repo root): PYTHONUNBUFFERED=1 python3 -m research.explore_decode_splits [--quick] [--tune|--floor|--timeline|--solo]
"""

from __future__ import annotations

import argparse
import dataclasses
import csv
import os
import time

from research.bench_decode import REGISTRATION, gated

# (batch, heads, kv_heads, seq_len, head_dim, dtype): the llama-bench decode artifact's single-sequence decode
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
    # more programs per SM (2 × split_factor), each with less shared memory: a bare read
    # streams faster with 3-6 programs per SM than with 2 (--floor at 4e1ba4d)
    "n32_p4": {"split_factor": 2, "block_n": 32}, "n32_p4_w2": {"split_factor": 2, "block_n": 32, "num_warps": 2},
    "n32_p6_st2": {"split_factor": 3, "block_n": 32, "num_stages": 2},
    "n32_p6_w2_st2": {"split_factor": 3, "block_n": 32, "num_stages": 2, "num_warps": 2},
    "n16_p8_w2": {"split_factor": 4, "block_n": 16, "num_warps": 2},
    "n64_p3_st2": {"split_factor": 1.5, "num_stages": 2},
}
# At 88142b2 --tune timed the two-pass combine, 4 stages, one launch with PDL, and twice the
# splits in 2 stages (4 or 2 warps); none beat the shipped plan (docs/measurement.md#small-batches-one-launch-tiles-warps-stages-explore_decode_splitspy---tune).
# --timeline: per-program records, raw, of these (shape, name, decode() overrides); None = the plan's splits.
TIMELINE_CASES = [
    ((1, 32, 8, 32768, 128, "float16"), "shipped", {}),
    ((1, 32, 8, 32768, 128, "float16"), "combine_2pass", {"combine_block": 16}),
    ((1, 32, 8, 32768, 128, "float16"), "s47", {"num_splits": 47}),
    ((1, 32, 8, 32768, 128, "float16"), "stages4", {"num_stages": 4}),
    ((1, 32, 8, 32768, 128, "float16"), "nopdl", {"pdl": False}),
    ((4, 32, 8, 8192, 128, "float16"), "shipped", {}),
    ((1, 32, 8, 8192, 128, "float16"), "shipped", {}),
]
# --floor: the calls below 0.85 (16-128 MB of K+V) and one that met it.
FLOOR_SHAPES = [
    (1, 32, 8, 8192, 128, "float16"), (2, 32, 8, 8192, 128, "float16"), (4, 32, 8, 8192, 128, "float16"),
    (1, 32, 8, 32768, 128, "float16"), (2, 32, 8, 32768, 128, "float16"), (1, 32, 8, 131072, 128, "float16"),
]
# --floor: split counts as multiples of the shipped plan's, and the yardstick's programs per SM.
FLOOR_SPLIT_FACTORS = (0.75, 1.5)
# Read yardsticks: (programs per SM, elements per load step of K and of V, pipeline stages).
# At 88142b2 the run took (1|2|4, 4096, 3): 4 per SM was best. Each of these keeps ~192 KB
# of shared memory per SM for the pipeline (all programs resident, one wave).
FLOOR_READS = ((4, 4096, 3), (6, 4096, 2), (8, 2048, 3), (16, 1024, 3), (3, 8192, 2), (2, 8192, 3))
# Timeline calls per shape (medians reported).
TIMELINE_CALLS = 30
# Split counts tried per shape beside the shipped plan (before rounding to whole tiles;
# duplicates after rounding dropped). The first run (c4eff61) tried 21 counts up to 512.
SPLITS = (1, 2, 4, 8, 16, 24, 32, 47, 64, 128)
# Keys per split below this are not tried (the partials then outweigh the keys).
MIN_KEYS = 128
# Plans of more waves of resident programs than this are not tried.
MAX_WAVES = 8
# Registered decode kernels timed beside triton_decode's plans (each checked first): cuDNN's
# SDPA as the vendor yardstick, and the CUDA C++ kernel that merges its splits on chip.
OTHER_KERNELS = ("sdpa_cudnn", "cuda_cluster_decode")
# A 20 × (few µs) arm set: the harness defaults would spend minutes; these keep ~5 s/shape.
POLICY = {"mode": "hot", "warmup_ms": 100, "min_samples": 12, "max_samples": 200, "min_time_ms": 30,
          "noise_target": 0.01, "timeout_s": 15}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tune", action="store_true", help="time launch variants (PDL, one launch) at small batch")
    ap.add_argument("--floor", action="store_true", help="read-only yardstick, split multiples and a timeline")
    ap.add_argument("--timeline", action="store_true", help="only per-program timelines (TIMELINE_CASES), raw")
    ap.add_argument("--solo", action="store_true",
                    help="the shipped plan as the only decode split count (twice), as in a sweep")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("explore_decode_splits needs a CUDA GPU")
        return 2

    from bench_kernels.triton_decode import BLOCK_N_FOR_D, RESIDENT_PER_SM, cut, decode, plan, sm_count
    from harness import TimingPolicy, device_l2_bytes, load_kernels, measure, measure_ceilings, rotation_slots

    out_dir = os.environ.get("OUT") or "."
    os.makedirs(out_dir, exist_ok=True)
    specs = load_kernels()
    from harness import load_registration

    reg = load_registration(REGISTRATION)  # its [correctness] gates every arm before it is timed
    ceil = measure_ceilings("cuda")
    l2 = device_l2_bytes("cuda")
    sms = sm_count()
    rows, timeline, raw = [], [], []
    if args.timeline:
        shapes = []
        for shape, name, kw in TIMELINE_CASES:
            b, h, hkv, n, d, dtype = shape
            dt = getattr(torch, dtype)
            gen = torch.Generator(device="cuda").manual_seed(n + b)
            q = torch.randn((b, h, 1, d), generator=gen, device="cuda").to(dt)
            ring = [(torch.randn((b, hkv, n, d), generator=gen, device="cuda").to(dt),
                     torch.randn((b, hkv, n, d), generator=gen, device="cuda").to(dt))
                    for _ in range(rotation_slots(2 * b * hkv * n * d * dt.itemsize, l2))]
            s_row, s_raw = decode_timeline(decode, q, ring, d ** -0.5, shape, kw, name)
            timeline.append(s_row)
            raw += s_raw
            ring = q = None
            torch.cuda.empty_cache()
    else:
        shapes = TUNE_SHAPES if args.tune else FLOOR_SHAPES[:5] if args.solo else FLOOR_SHAPES if args.floor else SHAPES
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
        block_n = BLOCK_N_FOR_D[d]
        shipped, _, _ = plan(b, hkv, n, d, sms)
        variants = {}  # name -> decode() keyword overrides; "num_splits" as launched
        if args.tune:
            variants["shipped"] = {"num_splits": shipped}
            for name, kw in TUNE.items():
                kw = dict(kw)
                factor = kw.pop("split_factor", 1)
                variants[name] = {**kw, "num_splits": cut(n, round(shipped * factor), kw.get("block_n", block_n))[0]}
        elif args.solo:
            # One split count among the arms, so the scratch stays cached from call to call
            # as in a sweep: arms of other split counts reallocate it (and zero the arrival
            # counters, a fill kernel) inside each other's timed window.
            variants["shipped"] = {"num_splits": shipped}
            variants["shipped_again"] = {"num_splits": shipped}
        elif args.floor:
            variants["shipped"] = {"num_splits": shipped}
            for f in FLOOR_SPLIT_FACTORS:
                actual, _ = cut(n, max(1, round(shipped * f)), block_n)
                if {"num_splits": actual} not in variants.values():
                    variants[f"s{actual}"] = {"num_splits": actual}
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
            ok, shown = gated(dataclasses.replace(specs["triton_decode"], name=f"triton_decode[{name}]", fn=fn),
                              shape, reg)
            if not ok:
                why[name] = shown
                continue
            out = torch.empty_like(q)

            def arm(slot, kw=kw, out=out):
                decode(q, *ring[slot % copies], out, scale, **kw)
            arms[name] = arm
        for other in OTHER_KERNELS:
            spec = specs[other]
            if spec.unusable_reason("cuda"):
                why[other] = spec.unusable_reason("cuda")
                continue
            ok, shown = gated(spec, shape, reg)
            if not ok:
                why[other] = shown
                continue
            o_c = torch.empty_like(q)
            arms[other] = lambda slot, fn=spec.fn, o_c=o_c: fn(q, *ring[slot % copies], o_c, causal=False,
                                                                scale=scale)
        # Yardstick at this size: copying the same K and V (two launches, as decode's split +
        # combine) reads and writes 2 × kv_bytes; how near the 2 GiB copy ceiling a transfer
        # this small gets bounds what any decode kernel can reach here.
        dst = [(torch.empty_like(ring[0][0]), torch.empty_like(ring[0][1])) for _ in range(copies)]

        def copy_kv(slot):
            dk, dv = dst[slot % copies]
            dk.copy_(ring[slot % copies][0])
            dv.copy_(ring[slot % copies][1])
        arms["copy_kv"] = copy_kv
        read_arms = {}
        if args.floor:
            read_arms = read_yardsticks(ring, sms, why)
            arms.update(read_arms)
            timeline.append(decode_timeline(decode, q, ring, scale, shape, {}, "shipped")[0])
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
                if name in read_arms:
                    splits = read_arms[name].programs
                rows.append({"B": b, "H": h, "Hkv": hkv, "L": n, "D": d, "dtype": dtype, "mode": mode,
                             "arm": name, "splits": splits,
                             "programs": splits if name in read_arms else b * hkv * splits if splits else None,
                             "shipped": name == "shipped" or (not args.tune and splits == shipped
                                                                  and "pdl" not in variants[name]),
                             "us": med * 1e3, "gbps": gbps, "frac": gbps / ceil.copy_gbps,
                             "rounds": len(m.rounds), "stop": m.stop_reason,
                             "host_gaps": m.host_gaps.get(name, {}).get("retried", 0),
                             "mean_mhz": clk.mean_mhz if clk else None, "wall_s": wall})
        for name, reason in why.items():
            rows.append({"B": b, "H": h, "Hkv": hkv, "L": n, "D": d, "dtype": dtype, "mode": "-", "arm": name,
                         "splits": variants[name]["num_splits"] if name in variants else None, "stop": reason})
        best = max((r for r in rows if r.get("L") == n and r.get("B") == b and r.get("frac")
                    and r["arm"] not in (*OTHER_KERNELS, "copy_kv") and r["arm"] not in read_arms
                    and r["mode"] == "hot"), key=lambda r: r["frac"], default=None)
        print(f"{shape}: {len(arms)} arms, shipped s{shipped}, best hot {best and best['arm']} "
              f"{best and round(best['frac'], 3)}", flush=True)
        arms = ring = q = dst = None  # free this shape's caches before the next
        torch.cuda.empty_cache()

    cols = ["B", "H", "Hkv", "L", "D", "dtype", "mode", "arm", "splits", "programs", "shipped", "us", "gbps", "frac",
            "rounds", "stop", "host_gaps", "mean_mhz", "wall_s"]
    stem = ("decode_tune" if args.tune else "decode_floor" if args.floor else "decode_solo" if args.solo
            else "decode_splits")
    if raw:
        with open(os.path.join(out_dir, "decode_timeline_raw.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(raw[0]))
            w.writeheader()
            w.writerows(raw)
    if timeline:
        with open(os.path.join(out_dir, "decode_timeline.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(timeline[0]))
            w.writeheader()
            w.writerows(timeline)
        print("\n".join(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
                        for r in timeline))
    if args.timeline:
        return
    with open(os.path.join(out_dir, stem + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    md = [f"# triton_decode split counts — copy ceiling {ceil.copy_gbps:.0f} GB/s, {sms} SMs",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        md.append("| " + " | ".join(f"{r.get(c):.4g}" if isinstance(r.get(c), float) else str(r.get(c, ""))
                                       for c in cols) + " |")
    text = "\n".join(md)
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write(text + "\n")
    print(text)


class ReadArm:
    """The read-only yardstick: sum K and V (one launch, ``programs`` programs) into ``out``."""

    def __init__(self, ring, programs: int, block: int, stages: int):
        import torch
        from research.decode_read_kernel import read_sum

        self.kernel = read_sum[(programs,)]  # looked up once: __call__ runs on the timed path
        self.ring, self.programs, self.block, self.stages = ring, programs, block, stages
        self.total = ring[0][0].numel()
        self.per = -(-self.total // programs)
        self.per = -(-self.per // block) * block  # whole load steps per program
        self.out = torch.zeros(programs, dtype=torch.float32, device=ring[0][0].device)

    def __call__(self, slot: int) -> None:
        k, v = self.ring[slot % len(self.ring)]
        self.kernel(k, v, self.out, self.per, self.total, BLOCK=self.block, num_warps=4, num_stages=self.stages)


def read_yardsticks(ring, sms: int, why: dict) -> dict:
    """ReadArm per FLOOR_READS, each checked: its sum of slot 0 against float64."""
    arms = {}
    k, v = ring[0]
    want = k.double().sum() + v.double().sum()
    scale = k.double().abs().sum() + v.double().abs().sum()
    for per_sm, block, stages in FLOOR_READS:
        arm = ReadArm(ring, per_sm * sms, block, stages)
        arm(0)
        got = arm.out.double().sum()
        err = float((got - want).abs() / scale)
        name = f"read_kv_p{per_sm}_b{block}_s{stages}"
        if err < 1e-5:  # fp32 partial sums of ≤ 2^27 terms, relative to Σ|x|
            arms[name] = arm
        else:
            why[name] = f"sum off by {err:.3g} of sum |x|"
    return arms


def decode_timeline(decode, q, ring, scale, shape, kw: dict, name: str) -> tuple[dict, list[dict]]:
    """Per-program %globaltimer records of ``decode(**kw)``, TIMELINE_CALLS eager calls.

    Each call is held behind a spin (as the harness's hot mode) and framed by two stamp
    kernels that write the timer: stamp → split → combine → stamp. Returns the median over
    calls of: launch gap (stamp to first split start), spread of split starts, split span,
    median/max split program, combine gap and span, total stamp to stamp; and the raw rows
    (call, kind, program, start/end ns from the first stamp, SM).
    """
    import statistics

    import torch
    from research.decode_read_kernel import stamp

    from bench_kernels.triton_decode import plan, sm_count

    b, h, hkv, n, d = shape[:5]
    splits = kw.get("num_splits") or plan(b, hkv, n, d, sm_count())[0]
    n_split, n_comb = b * hkv * splits, (0 if kw.get("fused") else b * h)
    rec = torch.zeros((n_split + n_comb) * 3, dtype=torch.int64, device="cuda")
    stamps = torch.zeros(2, dtype=torch.int64, device="cuda")
    out = torch.empty_like(q)
    per_call, raw = [], []
    for i in range(TIMELINE_CALLS + 3):
        k, v = ring[i % len(ring)]
        torch.cuda._sleep(2_000_000)
        stamp[(1,)](stamps, 0)
        launched = decode(q, k, v, out, scale, **kw, timeline=rec)
        stamp[(1,)](stamps, 1)
        torch.cuda.synchronize()
        if launched != splits:
            raise RuntimeError(f"timeline: decode launched {launched} splits, expected {splits}")
        if i < 3:  # compile and warm
            continue
        r = rec.view(-1, 3).cpu()
        t0, t1 = (int(x) for x in stamps.cpu())
        sp, cb = r[:n_split], r[n_split:]
        dur = (sp[:, 1] - sp[:, 0]).double()
        last = int(cb[:, 1].max()) if n_comb else int(sp[:, 1].max())
        per_call.append({
            "launch_gap_us": (int(sp[:, 0].min()) - t0) / 1e3,
            "start_spread_us": float(sp[:, 0].max() - sp[:, 0].min()) / 1e3,
            "split_span_us": float(sp[:, 1].max() - sp[:, 0].min()) / 1e3,
            "split_prog_med_us": float(dur.median()) / 1e3,
            "split_prog_max_us": float(dur.max()) / 1e3,
            "end_spread_us": float(sp[:, 1].max() - sp[:, 1].min()) / 1e3,
            "combine_gap_us": float(cb[:, 0].min() - sp[:, 1].max()) / 1e3 if n_comb else 0.0,
            "combine_span_us": float(cb[:, 1].max() - cb[:, 0].min()) / 1e3 if n_comb else 0.0,
            "tail_us": (t1 - last) / 1e3,
            "total_us": (t1 - t0) / 1e3,
            "sms_used": int(torch.unique(sp[:, 2]).numel()),
        })
        for j, (start, end, sm) in enumerate(r.tolist()):
            raw.append({"case": name, "B": b, "L": n, "call": i - 3, "kind": "split" if j < n_split else "combine",
                        "program": j if j < n_split else j - n_split, "start_ns": start - t0, "end_ns": end - t0,
                        "sm": sm})
    row = {"case": name, "B": b, "L": n, "splits": splits, "programs": n_split, "calls": len(per_call)}
    for key in per_call[0]:
        row[key] = float(statistics.median(c[key] for c in per_call))
    return row, raw


if __name__ == "__main__":
    raise SystemExit(main())
