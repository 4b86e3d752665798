"""How long a device-wide synchronize takes once the caller's stream has finished a call: for an
honest call (nothing left running) and for calls that leave work on another stream (issue 25's
"work that outlives the call"), from a large batch of matmuls down to one small one. These
figures set the drain threshold of the harness's leftover check (docs/measurement.md#what-a-timed-number-has-been-through).

    PYTHONUNBUFFERED=1 python3 -m research.drain_probe [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics


def drains_us(fn, calls: int) -> list[float]:
    """Per call: µs of the harness's drain (harness.measurement.leftover.drain_s: a device-wide
    synchronize with the GIL held) after the current stream is already done."""
    import torch

    from harness import drain_s

    out = []
    for _ in range(calls):
        fn()
        torch.cuda.current_stream().synchronize()
        out.append(drain_s("cuda") * 1e6)
    return out


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def honest():
        a @ a

    def leaves(n, size):
        x = a[:size, :size]

        def fn():
            a @ a
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(n):
                    x @ x
        return fn

    cases = {"honest 4096^3 matmul": honest, "leaves 8 x 4096^3 on a side stream": leaves(8, 4096),
             "leaves 1 x 1024^3": leaves(1, 1024), "leaves 1 x 256^3": leaves(1, 256)}
    print(f"{'case':<40} {'p50 us':>8} {'p90 us':>8} {'p99 us':>8} {'max us':>8}")
    for name, fn in cases.items():
        drains_us(fn, 20)
        d = sorted(drains_us(fn, args.calls))
        q = statistics.quantiles(d, n=100)
        print(f"{name:<40} {q[49]:8.1f} {q[89]:8.1f} {q[98]:8.1f} {d[-1]:8.1f}")


if __name__ == "__main__":
    main()
