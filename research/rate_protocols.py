"""Issue 16, item 5: why an absolute rate differs between two timers, one factor at a time.

Two questions, on one GPU, same kernel, same inputs:
  1. decode (memory-bound, B 16, H 32, Hkv 8, 8k keys, fp16): does do_bench's L2 flush
     (``zero_`` of 256 MB, which leaves the L2 full of dirty lines) slow the timed kernel?
     Per-call event timing, back to back, with: no flush; a zero_ flush (as do_bench); a
     zero_ flush followed by a read of another 256 MB buffer (clean L2, same eviction).
  2. flash (compute-bound, B 8, H 16, N 4096, D 128, fp16): how long must a kernel run back
     to back before its clock and time settle? After 3 s idle, W ms of back-to-back calls,
     then 100 timed back-to-back calls, for W in WARM_MS; NVML's SM clock and power during
     the timed calls.
plus ``triton.testing.do_bench`` of each. Writes $OUT/rate_protocols.json; prints a table.
Figures are not ledger-backed.

    python3 -m research.rate_protocols                  (both parts, ~2 min on the H200)
    python3 -m research.rate_protocols --decode-mechanism   (~1 min: part 1 split by cause)
    python3 -m research.rate_protocols --sweep-context [--no-run-config]
        (~1 min: decode's sustained phase inside run_config vs outside it; run it with and
        without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)

``--decode-mechanism`` separates two suspects for decode's gap to do_bench: host launch
gaps (a loop whose host enqueue is slower than the GPU puts launch latency inside the
window; a spin kernel queued first keeps the GPU behind the host) and the flush's dirty
L2 lines written back during the timed kernel (zero_ vs zero_ then a read). It also times
the harness's sustained phase (which flushes as do_bench does), as ``bench sweep`` runs it.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

FLUSH_BYTES = 256 << 20  # triton.testing's cache buffer size
WARM_MS = (0, 50, 200, 1000, 3000)
N_TIMED = 100
IDLE_S = 3.0


class Poller:
    """SM clock and power from NVML every 5 ms, in a thread."""

    def __init__(self):
        import pynvml

        pynvml.nvmlInit()
        self.nv = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        self.samples = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        nv = self.nv
        while not self.stop_ev.is_set():
            self.samples.append((time.perf_counter(), nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_SM),
                                 nv.nvmlDeviceGetPowerUsage(self.h) / 1000))
            time.sleep(0.005)

    def between(self, t0, t1):
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return None, None
        return statistics.fmean(x[1] for x in s), max(x[2] for x in s)

    def close(self):
        self.stop_ev.set()
        self.t.join()


def timed_loop(fn, before, n):
    """Per-call event times (ms) of n back-to-back calls, ``before`` outside each window."""
    import torch

    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for s, e in ev:
        if before is not None:
            before()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in ev]


def run_for(fn, ms):
    import torch

    t_end = time.perf_counter() + ms / 1000
    while time.perf_counter() < t_end:
        for _ in range(4):
            fn()
        torch.cuda.synchronize()


def timed_loop_ahead(fn, before, n, spin_ms):
    """timed_loop behind a spin kernel of spin_ms: the host enqueues ahead of the GPU."""
    import torch

    torch.cuda._sleep(int(spin_ms * 1e-3 * 2.0e9))
    return timed_loop(fn, before, n)


def host_enqueue_us(fn, n=200):
    import torch

    torch.cuda.synchronize()
    torch.cuda._sleep(int(50e-3 * 2.0e9))  # the GPU busy: enqueue never waits on it
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t


def decode_case():
    """triton_decode at B 16, H 32, Hkv 8, 8k keys fp16: (call, its output, the zero_ flush,
    the zero_-then-read flush)."""
    import torch

    from harness import Config, get_kernel, make_inputs

    cfg = Config("decode", 16, 32, 8, 8192, 128, "float16", False)
    spec = get_kernel("triton_decode")
    q, k, v = make_inputs(cfg, 0, "normal", "cuda")
    o = torch.empty_like(q)
    zbuf = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rbuf = torch.ones(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")

    def fn():
        spec.fn(q, k, v, o, causal=cfg.causal, scale=cfg.scale)

    def zero_then_read():
        zbuf.zero_()
        sink.copy_(rbuf.sum())

    return fn, o, zbuf.zero_, zero_then_read


def decode_mechanism() -> int:
    import triton.testing

    from harness import SustainBudget, sustain

    out_dir = Path(os.environ.get("OUT") or "bench-out")
    out_dir.mkdir(parents=True, exist_ok=True)
    fn, o, zero_flush, zero_then_read = decode_case()

    def poison():
        o.fill_(float("nan"))

    run_for(fn, 300)
    rows = [{"protocol": "host enqueue of one call (us)", "value": host_enqueue_us(fn)}]
    n = 100
    for label, before in (("no flush", None), ("poison fill", poison), ("zero_ flush", zero_flush),
                          ("zero_ then read", zero_then_read)):
        rows.append({"protocol": f"{label}: loop", "value": statistics.median(timed_loop(fn, before, n))})
        rows.append({"protocol": f"{label}: loop behind a 20 ms spin",
                     "value": statistics.median(timed_loop_ahead(fn, before, n, 20.0))})
    sus = sustain("d", lambda s: fn(), n_slots=1, device="cuda", prepare=lambda s: poison(),
                  budget=SustainBudget(warm_s=0.2, timed_s=0.2))
    rows.append({"protocol": "harness sustained phase (do_bench's flush)", "value": sus.median_ms})
    rows.append({"protocol": "triton.testing.do_bench",
                 "value": triton.testing.do_bench(fn, warmup=100, rep=300, return_mode="median")})
    (out_dir / "decode_mechanism.json").write_text(json.dumps(rows, indent=2))
    for r in rows:
        print(f"  {r['protocol']:<45} {r['value']:.4f}")
    return 0


def sweep_context() -> int:
    """Decode's sustained phase inside ``run_config`` (as ``bench sweep`` runs it) against the
    same phase outside it, factor by factor: the row's calls, ``sustain`` on fresh inputs with
    and without the poison, a plain flushed loop, do_bench; host time per loop iteration
    against device time per call (a host slower than the GPU puts launch gaps in windows)."""
    import sys

    import torch
    import triton.testing

    from harness import SustainBudget, SweepContext, l2_flush, poison_, run_config, sustain
    from research.rate_vs_do_bench import TIMEOUT_S, quantiles, rate_line

    out_dir = Path(os.environ.get("OUT") or "bench-out")
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default allocator")
    rows = []

    def q(xs):
        d = quantiles(xs)
        return f"p10 {d['p10']:.4f} p50 {d['p50']:.4f} p90 {d['p90']:.4f} n {d['n']}"

    fn, o, zero_flush, _ = decode_case()
    from harness import Config
    cfg = Config("decode", 16, 32, 8, 8192, 128, "float16", False)
    if "--no-run-config" not in sys.argv:
        ctx = SweepContext(reg=rate_line("triton_decode", cfg, {"mode": "hot", "timeout_s": TIMEOUT_S}), device="cuda")
        row = next(r for r in run_config(cfg, ("triton_decode",), ctx) if r.payload.get("candidate") == "triton_decode")
        sus = row.payload.get("sustained") or {}
        rows.append(("run_config sustained calls", q(sus.get("samples_ms") or [0.0]),
                     f"host_us {row.payload['metrics'].get('host_us')}"))
    run_for(fn, 300)
    flush = l2_flush("cuda")
    for label, prep in (("sustain, poison_ + flush", lambda s: poison_(o)), ("sustain, flush only", None)):
        s = sustain("d", lambda s: fn(), n_slots=1, device="cuda", prepare=prep,
                    budget=SustainBudget(warm_s=0.3, timed_s=0.3))
        rows.append((label, q(s.samples), ""))
    for label, before in (("loop, l2_flush", flush), ("loop, poison_ then l2_flush", lambda: (poison_(o), flush())),
                          ("loop, do_bench-size zero_", zero_flush)):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ts = timed_loop(fn, before, 200)
        wall = (time.perf_counter() - t0) / 200 * 1e3
        rows.append((label, q(ts), f"wall per iteration {wall:.4f} ms (host enqueue + drain)"))
    rows.append(("host enqueue of one call (us)", f"{host_enqueue_us(fn):.1f}", ""))
    rows.append(("do_bench", f"{triton.testing.do_bench(fn, warmup=100, rep=300, return_mode='median'):.4f}", ""))
    print(f"## allocator: {tag}")
    for r in rows:
        print(f"  {r[0]:<32} {r[1]}  {r[2]}")
    name = "sweep_context_" + ("expandable" if "expandable" in tag else "default") + ".json"
    (out_dir / name).write_text(json.dumps(rows, indent=2))
    return 0


def main() -> int:
    import sys

    if "--decode-mechanism" in sys.argv[1:]:
        return decode_mechanism()
    if "--sweep-context" in sys.argv[1:]:
        return sweep_context()
    import torch
    import triton.testing

    from harness import Config, get_kernel, make_inputs

    out_dir = Path(os.environ.get("OUT") or "bench-out")
    out_dir.mkdir(parents=True, exist_ok=True)
    poll = Poller()
    report = {"decode": [], "flash": []}

    def clocked(run):
        t0 = time.perf_counter()
        r = run()
        t1 = time.perf_counter()
        return r, poll.between(t0, t1)

    # 1. decode and the flush's dirty lines
    fn, o, zero_flush, zero_then_read = decode_case()

    run_for(fn, 300)
    for label, before in (("no flush", None), ("zero_ flush (as do_bench)", zero_flush),
                          ("zero_ then read flush (clean L2)", zero_then_read)):
        ts, (mhz, pw) = clocked(lambda: timed_loop(fn, before, 200))
        report["decode"].append({"protocol": label, "median_ms": statistics.median(ts), "sm_mhz": mhz, "power_w": pw})
    theirs, (mhz, pw) = clocked(lambda: triton.testing.do_bench(fn, warmup=100, rep=600, return_mode="median"))
    report["decode"].append({"protocol": "triton.testing.do_bench", "median_ms": theirs, "sm_mhz": mhz, "power_w": pw})
    del fn, o
    torch.cuda.empty_cache()

    # 2. flash and the clock's settling time
    cfg = Config("attention", 8, 16, 16, 4096, 128, "float16", False)
    spec = get_kernel("triton_flash")
    q, k, v = make_inputs(cfg, 0, "normal", "cuda")
    o = torch.empty_like(q)
    fn = lambda: spec.fn(q, k, v, o, causal=cfg.causal, scale=cfg.scale)  # noqa: E731
    run_for(fn, 200)  # compile
    for w in WARM_MS:
        for before_label, before in (("cold", zero_flush), ("hot", None)):
            time.sleep(IDLE_S)
            run_for(fn, w)
            ts, (mhz, pw) = clocked(lambda: timed_loop(fn, before, N_TIMED))
            report["flash"].append({"warm_ms": w, "mode": before_label, "median_ms": statistics.median(ts),
                                    "first10_ms": statistics.median(ts[:10]), "last10_ms": statistics.median(ts[-10:]),
                                    "sm_mhz": mhz, "power_w": pw})
    time.sleep(IDLE_S)
    theirs, (mhz, pw) = clocked(lambda: triton.testing.do_bench(fn, warmup=100, rep=600, return_mode="median"))
    report["flash"].append({"warm_ms": "do_bench", "mode": "cold", "median_ms": theirs, "sm_mhz": mhz, "power_w": pw})
    poll.close()

    (out_dir / "rate_protocols.json").write_text(json.dumps(report, indent=2))
    for part, rows in report.items():
        print(f"## {part}")
        for r in rows:
            print("  " + "  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
