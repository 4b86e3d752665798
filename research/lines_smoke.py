"""One config of each registered line through the sweep's own ``run_config`` (gate, interleaved
timing and every timed-call check, floor, sustained phase where the bar judges rates), printed
as one line per outcome: a quick look, on a GPU, that the shipped lines' kernels still pass
after a change to the checks. Nothing is appended to a ledger; a decision needs `bench sweep`.

    PYTHONUNBUFFERED=1 python3 -m research.lines_smoke [LINE ...] [--configs N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    from harness import SweepContext, device_fingerprint, load_registration, run_config, stored_ceilings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lines", nargs="*", default=["flash-h200-v2", "decode-h200", "decode-small-h200"])
    ap.add_argument("--configs", type=int, default=1, help="configs per line, spread over its grid")
    args = ap.parse_args()
    root = Path.cwd()
    ceilings = stored_ceilings(root, device_fingerprint("cuda"))
    print(f"ceilings: {'stored' if ceilings else 'none stored for this device (no floor)'}")
    for line in args.lines:
        reg = load_registration(root / "registrations" / f"{line}.toml")
        step = max(1, len(reg.configs) // args.configs)
        ctx = SweepContext(reg=reg, device="cuda", ceilings=ceilings, root=str(root))
        for cfg in reg.configs[step // 2::step][:args.configs]:
            t0 = time.perf_counter()
            rows = run_config(cfg, reg.candidates, ctx)
            secs = time.perf_counter() - t0
            for r in rows:
                p = r.payload
                m = p.get("metrics") or {}
                what = (f"speedup {m['speedup']:.3f} [{m['speedup_ci_low']:.3f}, {m['speedup_ci_high']:.3f}] "
                        f"control {m['control']:.4f} impossible {p.get('impossible')!r}" if r.kind == "result"
                        else f"[{p.get('tag')}] {p.get('reason')}")
                print(f"{line:<18} {cfg.key():<48} {p['candidate']:<14} {r.kind:<10} {what}  ({secs:.1f} s)")


if __name__ == "__main__":
    main()
