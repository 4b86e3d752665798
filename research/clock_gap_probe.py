"""How much shorter an honest CUDA-event window reads than the independent clock around it
(timers.CallClock: from an event recorded before the call's before-work to the call's end
event, against CLOCK_BOOTTIME read before that event and after the end's synchronize), for
honest arms timed by ``measure`` in each mode (the NVML monitor polling, as in a sweep) and
by the sustained loop. These figures set GPU_WINDOW_SLACK_MS (timing/timers.py;
docs/measurement.md#clocks-the-harness-reads). Also the host timer's gaps and the cost of one
clock-integrity check (clockguard.check) on this host.

    PYTHONUNBUFFERED=1 python3 -m research.clock_gap_probe [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def report(label: str, windows) -> None:
    """One line per arm: windows, median/p90/p99/max shortfall (µs), largest overrun (µs)."""
    gaps = [(w.independent_ms - w.span_ms) * 1e3 for w in windows]
    over = max(max(w.timed_ms, w.span_ms) - w.independent_ms for w in windows) * 1e3
    print(f"{label:48s} n={len(gaps):4d} gap µs p50 {statistics.median(gaps):7.1f} p90 {_pct(gaps, .9):7.1f} "
          f"p99 {_pct(gaps, .99):7.1f} max {max(gaps):8.1f}  max over {over:6.2f}", flush=True)


def keeping(timer_cls):
    """``timer_cls`` that also keeps every window it read (``kept``, per arm): ``measure`` takes
    each round's window out of ``clock_calls`` as it judges it, so the probe keeps its own copy."""

    class Keeping(timer_cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.kept: dict[str, list] = {}

        def time_call(self, fn, *, arm="", **kwargs):
            ms = super().time_call(fn, arm=arm, **kwargs)
            self.kept.setdefault(arm, []).append(self.clock_calls[arm][-1])
            return ms

        def time_loop(self, calls, *, arm=""):
            out = super().time_loop(calls, arm=arm)
            if self.clock_calls.get(arm):
                self.kept.setdefault(arm, []).append(self.clock_calls[arm][-1])
            return out

    return Keeping


def main() -> None:
    import timeit

    import torch

    # The clocks are taken at harness's import.
    from harness import (Config, CudaEventTimer, HostTimer, TimingPolicy, check_clocks, make_inputs, measure,
                         seal_clocks, sustain)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = args.device
    seal_clocks()
    n = 20000
    print(f"clockguard.check(): {min(timeit.repeat(check_clocks, number=n, repeat=5)) / n * 1e6:.1f} µs a call",
          flush=True)
    dtype = "float16" if dev.startswith("cuda") else "float32"
    shapes = [(1, 8, 1024, 64), (4, 16, 4096, 128)] if dev.startswith("cuda") else [(1, 2, 128, 32)]
    modes = ("cold", "hot", "graph") if dev.startswith("cuda") else ("cold",)
    import torch.nn.functional as F

    for b, h, nq, d in shapes:
        cfg = Config("attention", b, h, h, nq, d, dtype, False)
        q, k, v = make_inputs(cfg, 0, "normal", dev)
        outs = {a: torch.empty_like(q) for a in ("sdpa", "again")}

        def arm(a):
            return lambda slot: outs[a].copy_(F.scaled_dot_product_attention(q, k, v))

        for mode in modes:
            timer = keeping(CudaEventTimer)(dev) if dev.startswith("cuda") else keeping(HostTimer)()
            pol = TimingPolicy(mode=mode, warmup_ms=50, min_samples=100, max_samples=300, min_time_ms=50,
                               noise_target=1e-6, timeout_s=30)
            m = measure({a: arm(a) for a in outs}, n_slots=1, policy=pol, device=dev, timer=timer)
            for a in outs:
                report(f"{cfg.key()} {mode} {a} ({m.arms[a].stats.median * 1e3:.0f} µs)", timer.kept[a])
            print(f"    faults: {m.clock_faults or 'none'}", flush=True)
        timer = keeping(CudaEventTimer)(dev) if dev.startswith("cuda") else keeping(HostTimer)()
        sus = sustain("sdpa", arm("sdpa"), n_slots=1, device=dev, timer=timer)
        report(f"{cfg.key()} sustained loops", timer.kept["sdpa"])
        print(f"    fault: {sus.clock_fault or 'none'}", flush=True)


if __name__ == "__main__":
    main()
