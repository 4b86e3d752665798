"""Where the shipped flash kernel stands against its peers (issue 31), by the timer a user runs.

    PYTHONUNBUFFERED=1 python3 -m research.peers_do_bench [--kernels triton_flash,sdpa_cudnn,fa4] [--out DIR]

For each shape of issue 31's table (fp16 and bf16, B·N = 32k tokens, H 16, D 128; N 1024 to
16384 non-causal, N 4096 causal) it times every named kernel through its registered
destination-passing function (fa4 through kernels/fa4.py: the same views the harness passes)
with ``triton.testing.do_bench`` (median; 100 ms warm-up, 600 ms of calls, L2 flushed) and
records the SM clock NVML reads after each. Each kernel is timed at a shape only once it has
passed the harness's float64 gate there, under flash-h200-v2's [correctness] (seeds,
families, tolerances; boundary shapes included): the table shows the gate's worst error.
Kernels that cannot run here are listed with why.
Writes ``peers_do_bench.md`` and ``.json`` under ``--out`` (default $OUT, else .).
These figures are not ledger-backed: the registered peer line is what decides.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

TOKENS = 32768
SHAPES = [("float16", 1024, False), ("float16", 4096, False), ("float16", 8192, False),
          ("float16", 16384, False), ("float16", 4096, True), ("bfloat16", 4096, False),
          ("bfloat16", 4096, True), ("bfloat16", 16384, False)]
WARMUP_MS, REP_MS = 100, 600


def sm_clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM))
    except Exception:  # a figure beside the rate, not a gate: absent is said as absent
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="triton_flash,sdpa_cudnn,fa4")
    ap.add_argument("--registration", default="flash-h200-v2.toml",
                    help="whose [correctness] gates each kernel before it is timed")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)

    import torch
    import triton.testing

    from harness import Config, gate, get_kernel, get_workload, load_kernels, load_registration, make_inputs
    from harness import flops as flops_of

    reg = load_registration(Path(__file__).resolve().parents[1] / "registrations" / a.registration)

    load_kernels()
    names = a.kernels.split(",")
    usable = {n: get_kernel(n).unusable_reason("cuda") for n in names}
    rows = []
    for dtype, n, causal in SHAPES:
        b = TOKENS // n
        cfg = Config("attention", b, 16, 16, n, 128, dtype, causal)
        q, k, v = make_inputs(cfg, 0, "normal", "cuda")
        scale, flops = cfg.scale, flops_of(cfg)
        for name in names:
            if usable[name]:
                continue
            spec = get_kernel(name)
            res = gate(spec, cfg, workload=get_workload(reg.workload), seeds=reg.seeds, families=reg.families, atol=reg.atol[dtype], rtol=reg.rtol[dtype],
                     device="cuda", min_pass_rate=reg.min_pass_rate)
            worst = ((res.to_row().get("worst") or {}).get("figures") or {})
            row = dict(kernel=name, dtype=dtype, seq_len=n, batch=b, causal=causal, gate_passed=res.passed,
                       gate=None if res.passed else f"[{res.tag}] {res.reason}",
                       worst_tolerance_ratio=worst.get("tolerance_ratio"), worst_rel_frobenius=worst.get("rel_frobenius"))
            rows.append(row)
            if not res.passed:
                print(f"{dtype} N{n} {'causal' if causal else 'full'} {name}: gate failed, not timed: {row['gate']}")
                continue
            out = torch.empty_like(q)
            ms = triton.testing.do_bench(lambda fn=spec.fn, args=(q, k, v, out): fn(*args, causal=causal, scale=scale),
                                         warmup=WARMUP_MS, rep=REP_MS, return_mode="median")
            clock = sm_clock_mhz()
            row.update(ms=ms, tflops=flops / ms / 1e9, sm_clock_mhz=clock)
            print(f"{dtype} N{n} {'causal' if causal else 'full'} {name}: {ms:.4f} ms, "
                  f"{flops / ms / 1e9:.1f} TFLOP/s at {clock} MHz (gate passed, worst "
                  f"{row['worst_tolerance_ratio']:.3g} of tolerance)")
        q = k = v = None  # freed before the next shape's inputs
        torch.cuda.empty_cache()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers_do_bench.json").write_text(json.dumps(dict(rows=rows, unusable=usable,
                                                             device=torch.cuda.get_device_name()), indent=1))
    lines = [f"TFLOP/s by `triton.testing.do_bench` (median), {torch.cuda.get_device_name()}, "
             f"B·N = {TOKENS} tokens, H 16, D 128; each kernel timed after passing the float64 gate "
             f"({a.registration}'s [correctness])", "",
             "| kernel | " + " | ".join(f"{dt} N {n}{' causal' if c else ''}" for dt, n, c in SHAPES) + " |",
             "|---|" + "---|" * len(SHAPES)]
    for name in names:
        if usable[name]:
            lines.append(f"| {name} | cannot run here: {usable[name]} |")
            continue
        cells = []
        for dt, n, c in SHAPES:
            r = next(r for r in rows if r["kernel"] == name and (r["dtype"], r["seq_len"], r["causal"]) == (dt, n, c))
            cells.append(f"{r['tflops']:.0f}" if r["gate_passed"] else f"gate failed ({r['gate'][:60]})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    (out / "peers_do_bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
