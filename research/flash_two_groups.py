"""Issue 31 item 3, the one Hopper lever of its list not tried before: two softmax groups per
program. Each program owns two query sub-tiles of SUB_M rows and walks the keys once; per key
tile the two groups' QKᵀ, softmax and PV are independent, so the compiler may issue one
group's tensor-core work while the other's softmax runs (FlashAttention-3's "ping-pong",
here within one program: Triton 3.6 exposes no warpgroup barriers on sm_90).

    PYTHONUNBUFFERED=1 python3 -m research.flash_two_groups [--out DIR]

Non-causal, MHA, head_dim 128, seq_len a multiple of 2·SUB_M and BLOCK_N (the shapes of the
peer line at N >= 4096). Every variant passes the harness's correctness gate under
flash-h200-v2's [correctness] (gated together with the shipped ``triton_flash`` and SDPA's
cuDNN backend: the float64 references shared; the gate's boundary shapes, which the variant
does not take, are skipped for it) before it is timed with ``triton.testing.do_bench`` beside
them on the same inputs. Writes ``flash_two_groups.md`` / ``.json`` under
``--out`` (default $OUT, else .). A variant that does not beat the shipped kernel stays here.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import triton
import triton.language as tl

TOKENS = 32768
SHAPES = [("float16", 4096), ("float16", 8192), ("float16", 16384), ("bfloat16", 4096), ("bfloat16", 16384)]
# (SUB_M, BLOCK_N, warps, stages): two groups of SUB_M rows each.
VARIANTS = [(64, 64, 4, 2), (64, 64, 8, 2), (64, 128, 8, 2), (128, 64, 8, 2), (64, 64, 4, 3), (64, 128, 4, 2)]
WARMUP_MS, REP_MS = 100, 600
LOG2E = 1.4426950408889634


@triton.jit
def _group_step(q, k, v, acc, m_i, l_i, qk_scale):
    """One key tile into one group's (acc, m_i, l_i): the shipped kernel's unmasked step."""
    qk = tl.dot(q, k.T)
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
    alpha = tl.math.exp2(m_i - m_ij)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, m_ij, l_i * alpha + tl.sum(p, 1)


@triton.jit
def _two_groups_fwd(O, desc_q, desc_k, desc_v, desc_o, qk_scale, N_CTX,
                    HEAD_DIM: tl.constexpr, SUB_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    row0 = tl.program_id(1) * N_CTX
    m0 = row0 + pid_m * 2 * SUB_M
    q0 = desc_q.load([m0, 0])
    q1 = desc_q.load([m0 + SUB_M, 0])
    acc0 = tl.zeros([SUB_M, HEAD_DIM], dtype=tl.float32)
    acc1 = tl.zeros([SUB_M, HEAD_DIM], dtype=tl.float32)
    m0_i = tl.zeros([SUB_M], dtype=tl.float32) - float("inf")
    m1_i = tl.zeros([SUB_M], dtype=tl.float32) - float("inf")
    l0_i = tl.zeros([SUB_M], dtype=tl.float32)
    l1_i = tl.zeros([SUB_M], dtype=tl.float32)
    for start_n in tl.range(0, N_CTX, BLOCK_N):
        k = desc_k.load([row0 + start_n, 0])
        v = desc_v.load([row0 + start_n, 0])
        acc0, m0_i, l0_i = _group_step(q0, k, v, acc0, m0_i, l0_i, qk_scale)
        acc1, m1_i, l1_i = _group_step(q1, k, v, acc1, m1_i, l1_i, qk_scale)
    desc_o.store([m0, 0], (acc0 * (1.0 / l0_i)[:, None]).to(O.dtype.element_ty))
    desc_o.store([m0 + SUB_M, 0], (acc1 * (1.0 / l1_i)[:, None]).to(O.dtype.element_ty))


def two_groups(q, k, v, out, *, scale: float, variant, causal: bool = False) -> None:
    """out = softmax(q kᵀ · scale) v for (B, H, N, 128) contiguous q, k, v, out (MHA, non-causal)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    sub_m, block_n, warps, stages = variant
    b, h, n, d = q.shape
    if causal or n % (2 * sub_m) or n % block_n or k.shape != q.shape:
        raise ValueError(f"two_groups: needs MHA and seq_len a multiple of {2 * sub_m} and {block_n}, got {tuple(q.shape)}")
    rows = b * h * n
    dq, dk, dv, do = (TensorDescriptor(t, shape=[rows, d], strides=[d, 1], block_shape=[bs, d])
                      for t, bs in ((q, sub_m), (k, block_n), (v, block_n), (out, sub_m)))
    _two_groups_fwd[(n // (2 * sub_m), b * h)](out, dq, dk, dv, do, float(scale) * LOG2E, n, HEAD_DIM=d, SUB_M=sub_m,
                                               BLOCK_N=block_n, num_warps=warps, num_stages=stages)


def _supports(variant):
    sub_m, block_n, _, _ = variant

    def why(cfg) -> str | None:
        if cfg.causal or cfg.kv_heads != cfg.heads or cfg.head_dim != 128:
            return "two_groups: non-causal MHA at head_dim 128 only"
        if cfg.seq_len % (2 * sub_m) or cfg.seq_len % block_n:
            return f"two_groups: seq_len a multiple of {2 * sub_m} and {block_n} only"
        return None
    return why


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)

    import dataclasses

    import torch
    import triton.testing

    from harness import Config, GatePolicy, gate_kernels, get_kernel, get_workload, load_kernels, load_registration, make_inputs
    from harness import flops as flops_of

    load_kernels()
    reg = load_registration(Path(__file__).resolve().parents[1] / "registrations" / "flash-h200-v2.toml")
    base = get_kernel("triton_flash")
    specs = [*(dataclasses.replace(base, name=f"two_groups {v}", supports=_supports(v),
                                   fn=lambda q, k, v_, o, *, causal, scale, variant=v: two_groups(
                                       q, k, v_, o, scale=scale, variant=variant, causal=causal))
               for v in VARIANTS),
             base, get_kernel("sdpa_cudnn")]
    results = []
    for dtype, n in SHAPES:
        cfg = Config("attention", TOKENS // n, 16, 16, n, 128, dtype, False)
        flops = flops_of(cfg)
        # Every arm through the harness's gate at once (the float64 references shared), under
        # flash-h200-v2's [correctness]; a variant that fails to compile fails its gate.
        run = gate_kernels(specs, cfg, GatePolicy(reg.seeds, reg.atol[dtype], reg.rtol[dtype], families=reg.families,
                                                  device="cuda", min_pass_rate=reg.min_pass_rate),
                           workload=get_workload(reg.workload))
        for spec in specs:
            g = run.results[spec.name]
            worst = ((g.to_row().get("worst") or {}).get("figures") or {}).get("tolerance_ratio")
            row = {"dtype": dtype, "seq_len": n, "kernel": spec.name, "worst_of_tolerance": worst,
                   "error": None if g.passed else f"gate [{g.tag}]: {str(g.reason)[:200]}"}
            if g.passed:
                q, k, v = make_inputs(cfg, 2, "normal", "cuda")
                out = torch.empty_like(q)
                ms = triton.testing.do_bench(lambda: spec.fn(q, k, v, out, causal=False, scale=cfg.scale),
                                             warmup=WARMUP_MS, rep=REP_MS)
                row.update(ms=ms, tflops=flops / ms / 1e9)
                del q, k, v, out
            print(json.dumps(row), flush=True)
            results.append(row)
    names = list(dict.fromkeys(r["kernel"] for r in results))
    cols = [f"{d} N {n}" for d, n in SHAPES]
    lines = [f"TFLOP/s by `triton.testing.do_bench` (median), {torch.cuda.get_device_name()}, B·N = {TOKENS} tokens, "
             f"H 16, D 128, non-causal; each variant checked against float64 first ('—': failed or did not compile)",
             "", "| kernel | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name in names:
        cells = []
        for d, n in SHAPES:
            r = next(x for x in results if x["kernel"] == name and x["dtype"] == d and x["seq_len"] == n)
            cells.append(f"{r['tflops']:.0f}" if r.get("tflops") else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "flash_two_groups.md").write_text(text)
    (out_dir / "flash_two_groups.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
