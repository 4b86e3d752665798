"""The gate before timing: every seed × input family at the config and its boundary sequence
lengths, each case called twice (before the reference exists, then on fresh buffers after
it) and the two calls compared, then the side-stream check on CUDA. A seed passes when all
its checks do; the gate passes on the pass rate and no structural failure.
"""

from __future__ import annotations

import time

from harness.errors import UserError
from harness.measurement.correctness.checks import check_call, exception_text, spec_parts
from harness.measurement.correctness.figures import chunks, fmt_idx, unravel
from harness.measurement.correctness.poison import as_bits
from harness.measurement.correctness.results import CALL_TAGS, STRUCTURAL_TAGS, CheckReport, GateResult
from harness.measurement.correctness.side_stream import side_stream_check
from harness.workloads import Config
from harness.workloads.inputs import DEFAULT_FAMILIES, FAMILIES, boundary_configs, make_inputs


def _new_out(cfg: Config, device):
    import torch

    qs, _, _ = cfg.shapes()
    return torch.empty(qs, dtype=getattr(torch, cfg.dtype), device=device)


def checksum(t) -> tuple[int, int]:
    """A position-weighted checksum of t's bits: equal for bit-identical tensors and, short
    of a 2^-64 accident, different otherwise. Lets the gate remember every earlier output of
    a config without keeping the outputs."""
    import torch

    bits = as_bits(t).reshape(-1)
    acc = total = 0
    for s, e in chunks(bits.numel()):
        b = bits[s:e].to(torch.int64)
        w = torch.arange(s, e, dtype=torch.int64, device=b.device).mul_(0x9E3779B1).add_(1)
        acc += int((b * w).sum())
        total += int(b.sum())
    return acc & (2**64 - 1), total


def _disagreement(a, b, ref, atol: float, rtol: float) -> str | None:
    """Where two passing outputs differ by more than the tolerance, or None."""
    import torch

    fa, fb, fr = a.reshape(-1), b.reshape(-1), ref.reshape(-1)
    worst, at = 0.0, -1
    for s, e in chunks(fa.numel()):
        r = fr[s:e]
        d = (fa[s:e].to(torch.float64) - fb[s:e].to(torch.float64)).abs()
        ratio = d / (r.abs() * rtol + atol).clamp_min(torch.finfo(torch.float64).tiny)
        j = int(torch.argmax(ratio))
        if float(ratio[j]) > worst:
            worst, at = float(ratio[j]), s + j
    if worst <= 1.0:
        return None
    return (f"the two calls disagree: {float(fa[at]):.4g} vs {float(fb[at]):.4g} at "
            f"{fmt_idx(unravel(at, a.shape))} (ref {float(fr[at]):.4g}), beyond atol {atol:g} + rtol {rtol:g}·|ref|")


def _run_case(fn, cfg: Config, seed: int, family: str, atol: float, rtol: float, device, prefix: str,
              seen: dict):
    """One (config, seed, family) check: returns (CheckReport, the first call's visible output).

    ``seen``: checksums of the config's earlier outputs (the "inputs changed" check).
    """
    q, k, v = make_inputs(cfg, seed, family, device)
    pristine = tuple(t.clone() for t in (q, k, v))
    key = cfg.key()

    def report(tag=None, detail=None, fig=None, fig2=None, secs=0.0):
        return CheckReport(config=key, seed=seed, family=family, passed=tag is None, tag=tag,
                           reason=f"{prefix}: {detail}" if tag else None, figures=fig, after_figures=fig2,
                           reference_seconds=secs)

    def repeat(out, fig):
        earlier = seen.get(checksum(out))
        if earlier is None:
            return None
        return "degenerate", (f"output is bit-identical to seed {earlier[0]} family {earlier[1]}'s although "
                              f"the inputs changed (a result cached by shape or pointer?): {fig.summary()}")

    first = check_call(fn, cfg, q, k, v, _new_out(cfg, device), pristine, atol=atol, rtol=rtol, repeat=repeat)
    secs = first.reference_seconds
    if first.tag:
        return report(first.tag, first.detail, first.figures, secs=secs), first.visible
    # Second call: fresh allocations while the first call's buffers are still alive (new
    # addresses), after the reference has run and freed its scratch.
    q2, k2, v2 = (t.clone() for t in pristine)
    second = check_call(fn, cfg, q2, k2, v2, _new_out(cfg, device), pristine, atol=atol, rtol=rtol,
                        ref=first.ref, mismatch="stale_mismatch", nonfinite="stale_mismatch", flat=False)
    if second.tag:
        why = ("second call: " if second.tag in CALL_TAGS else
               "first call passed, second call (fresh buffers, after the reference ran) fails: ")
        return report(second.tag, why + second.detail, first.figures, second.figures, secs), first.visible
    dis = _disagreement(first.visible, second.visible, first.ref, atol, rtol)
    if dis:
        return report("stale_mismatch", dis, first.figures, second.figures, secs), first.visible
    return report(fig=first.figures, fig2=second.figures, secs=secs), first.visible


def gate(spec, cfg: Config, *, seeds, families=DEFAULT_FAMILIES, atol: float, rtol: float,
         device: str = "cpu", min_pass_rate: float = 1.0) -> GateResult:
    """Check ``spec`` at ``cfg`` and its boundary configs for every seed × family.

    A seed passes if every check of it passes; the gate passes if the share of passing
    seeds reaches ``min_pass_rate`` and no failure is structural (STRUCTURAL_TAGS).
    """
    import torch

    t_start = time.perf_counter()
    fn, name = spec_parts(spec)
    seeds = tuple(int(s) for s in seeds)
    families = tuple(families)
    if not seeds:
        raise UserError("the correctness gate needs at least one seed")
    for fam in families:
        if fam not in FAMILIES:
            raise UserError(f"unknown input family '{fam}' (known: {', '.join(FAMILIES)})")
    if not families:
        raise UserError("the correctness gate needs at least one input family")
    if not 0.0 < min_pass_rate <= 1.0:
        raise UserError(f"min_pass_rate must be in (0, 1], got {min_pass_rate}")
    if atol < 0 or rtol < 0:
        raise UserError(f"tolerances must be >= 0, got atol {atol}, rtol {rtol}")
    dev_type = torch.device(device).type
    if hasattr(spec, "unusable_reason") and spec.unusable_reason(dev_type):
        raise UserError(f"kernel '{name}' cannot run here: {spec.unusable_reason(dev_type)}")
    if hasattr(spec, "config_reason") and spec.config_reason(cfg):
        raise UserError(f"kernel '{name}' cannot be gated at {cfg.key()}: {spec.config_reason(cfg)}")

    configs, skipped = [(cfg, "")], []
    for bc in boundary_configs(cfg):
        why = spec.config_reason(bc) if hasattr(spec, "config_reason") else None
        if why:
            skipped.append((bc.key(), why))
        else:
            configs.append((bc, f" (boundary seq_len {bc.seq_len})"))

    reports: list[CheckReport] = []
    for c, note in configs:
        seen: dict = {}  # checksums of this config's first-call outputs -> (seed, family)
        for seed in seeds:
            for fam in families:
                rep, visible = _run_case(fn, c, seed, fam, atol, rtol, device, f"seed {seed} family {fam}{note}", seen)
                reports.append(rep)
                if visible is not None:
                    seen.setdefault(checksum(visible), (seed, fam))
                del visible
    if dev_type == "cuda":
        q, k, v = make_inputs(cfg, seeds[0], families[0], device)
        tag = "side_stream"
        try:
            why = side_stream_check(fn, q, k, v, _new_out(cfg, device), causal=cfg.causal, scale=cfg.scale)
        except Exception as exc:
            why, tag = exception_text(exc), "exception"
        del q, k, v
        reports.append(CheckReport(config=cfg.key(), seed=seeds[0], family=families[0], passed=why is None,
                                   tag=tag if why else None,
                                   reason=f"seed {seeds[0]} family {families[0]}: {why}" if why else None,
                                   figures=None, after_figures=None, reference_seconds=0.0,
                                   phase="side_stream_check"))

    seed_ok = {s: all(r.passed for r in reports if r.seed == s) for s in seeds}
    n_ok = sum(seed_ok.values())
    rate = n_ok / len(seeds)
    fails = [r for r in reports if not r.passed]
    structural = any(r.tag in STRUCTURAL_TAGS for r in fails)
    return GateResult(
        kernel=name, config=cfg.key(), passed=rate >= min_pass_rate and not structural, pass_rate=rate,
        n_seeds=len(seeds), n_seeds_passed=n_ok, min_pass_rate=min_pass_rate, seeds=seeds, families=families,
        boundary_configs=tuple(c.key() for c, _ in configs[1:]), skipped_configs=tuple(skipped),
        atol=float(atol), rtol=float(rtol), reports=tuple(reports),
        reason=fails[0].reason if fails else None, tag=fails[0].tag if fails else None,
        reference_seconds=sum(r.reference_seconds for r in reports), seconds=time.perf_counter() - t_start)
