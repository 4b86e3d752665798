"""The gate before timing: every seed × input family at the config and its workload's boundary
configs (``Workload.boundary_configs``), each case called twice (before the reference exists, then on fresh buffers after
it) and the two calls compared, then the side-stream check on CUDA. A seed passes when all
its checks do; the gate passes on the pass rate and no structural failure. Several kernels
gated at one config share each case's inputs and float64 reference (``gate_kernels``). The
workload (``harness.workloads.api.Workload``) draws the inputs, allocates the outputs, calls the
kernel and computes the reference: the gate is the same for every workload, of one output
or several (each judged against its own reference, every check over all of them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, ContextManager

from harness.errors import UserError
from harness.measurement.correctness.checks import (Checked, call_checks, check_output, checksum, exception_text,
                                                    output_names, spec_parts, timed_reference)
from harness.measurement.correctness.figures import chunks, fmt_idx, unravel
from harness.measurement.correctness.poison import bits_equal
from harness.measurement.correctness.results import CALL_TAGS, STRUCTURAL_TAGS, CheckReport, GateResult, Tolerance
from harness.measurement.correctness.side_stream import side_stream_check


@dataclass(frozen=True)
class GatePolicy:
    """What every case of a gate is judged under: each seed × input family, the tolerance
    (|out − ref| ≤ atol + rtol·|ref|), the device, and the share of seeds that must pass
    (``min_pass_rate``; a structural failure fails the gate whatever the rate)."""

    seeds: tuple[int, ...]
    atol: float
    rtol: float
    families: tuple[str, ...] | None = None  # None: the workload's default_families
    device: str = "cpu"
    min_pass_rate: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if self.families is not None:
            object.__setattr__(self, "families", tuple(self.families))
        if not self.seeds:
            raise UserError("the correctness gate needs at least one seed")
        if self.families is not None and not self.families:
            raise UserError("the correctness gate needs at least one input family")
        if not 0.0 < self.min_pass_rate <= 1.0:
            raise UserError(f"min_pass_rate must be in (0, 1], got {self.min_pass_rate}")
        if self.atol < 0 or self.rtol < 0:
            raise UserError(f"tolerances must be >= 0, got atol {self.atol}, rtol {self.rtol}")

    @property
    def tol(self) -> Tolerance:
        return Tolerance(self.atol, self.rtol)

    def of(self, workload) -> GatePolicy:
        """This policy for ``workload``: its families checked against the workload's (None:
        the workload's default families)."""
        if self.families is None:
            return dataclasses.replace(self, families=tuple(workload.default_families))
        for fam in self.families:
            if fam not in workload.families:
                raise UserError(f"unknown input family '{fam}' (known: {', '.join(workload.families)})")
        return self


def _new_outs(workload, cfg, device) -> tuple:
    """A call's output buffers (``Workload.allocate_outputs``), fresh."""
    return tuple(workload.allocate_outputs(cfg, device))


def _disagreements(firsts, seconds, refs, workload, cfg, atol: float, rtol: float) -> str | None:
    """Where two passing calls' outputs differ by more than each output's tolerance (the
    first such output, named where there are several), or None."""
    tols = workload.output_tolerances(cfg, atol, rtol)
    for a, b, ref, (out_atol, out_rtol), name in zip(firsts, seconds, refs, tols, output_names(workload, cfg)):
        dis = _disagreement(a, b, ref, out_atol, out_rtol)
        if dis:
            return f"{name}: {dis}" if name else dis
    return None


def _disagreement(a, b, ref, atol: float, rtol: float) -> str | None:
    """Where two passing outputs differ by more than the tolerance, or None."""
    import torch

    fa, fb, fr = a.reshape(-1), b.reshape(-1), ref.reshape(-1)
    blocks = []
    for s, e in chunks(fa.numel(), fa.device):
        r = fr[s:e]
        d = (fa[s:e].to(torch.float64) - fb[s:e].to(torch.float64)).abs()
        ratio = d / (r.abs() * rtol + atol).clamp_min(torch.finfo(torch.float64).tiny)
        j = torch.argmax(ratio)
        blocks.append(torch.stack([ratio[j], (j + s).to(torch.float64)]))
    worst, at = 0.0, -1
    for w, i in (torch.stack(blocks).tolist() if blocks else []):  # one read for every block
        if w > worst:
            worst, at = w, int(i)
    if worst <= 1.0:
        return None
    return (f"the two calls disagree: {float(fa[at]):.4g} vs {float(fb[at]):.4g} at "
            f"{fmt_idx(unravel(at, a.shape))} (ref {float(fr[at]):.4g}), beyond atol {atol:g} + rtol {rtol:g}·|ref|")


class _Kernel:
    """One kernel's part of a gate: its reports so far, the checksums of its earlier outputs
    per config (the "inputs changed" check) and the configs it skips."""

    def __init__(self, spec, configs, workload):
        self.fn, self.name = spec_parts(spec)
        self.workload = workload
        self.configs = [c for c, _ in configs]
        self.skipped = []
        for c, _ in configs[1:]:
            why = spec.config_reason(c) if hasattr(spec, "config_reason") else None
            if why:
                self.skipped.append((c.key(), why))
                self.configs.remove(c)
        self.reports: list[CheckReport] = []
        # config key -> {(output index, checksum of that output of a first call): (seed, family)}
        self.seen: dict = {}


def _restore(checked: Checked, inputs, pristine) -> None:
    """After a call that failed a check, put the pristine content back into the shared input set
    it may have changed (the call itself is blamed by its own check), so the next kernel called
    on it reads the case's inputs. A call that passed had its inputs compared already."""
    if checked.tag is None:
        return
    for t, p in zip(inputs, pristine):
        if not bits_equal(p, t):
            t.copy_(p)


def _first(k: _Kernel, c, inputs, pristine, device) -> Checked:
    """The kernel's first call of a case, before the reference exists: the call's own checks."""
    first = call_checks(k.fn, c, inputs, _new_outs(k.workload, c, device), pristine, workload=k.workload)
    _restore(first, inputs, pristine)
    return first


@dataclass(frozen=True)
class _Case:
    """One (config, seed, family) case once its reference exists: the inputs of the second calls
    (``inputs``, fresh copies), the pristine content, the reference and the seconds it took,
    and the prefix of its reports' reasons."""

    c: object  # the config (a Config or a GridPoint)
    seed: int
    family: str
    inputs: tuple
    pristine: tuple
    ref: object
    secs: float
    prefix: str


def _judge_case(k: _Kernel, case: _Case, first: Checked, tol: Tolerance, device):
    """The rest of one case once the reference exists: the first call's output against it,
    then a second call on fresh buffers (allocated while the first call's were alive: new
    addresses), and the two calls compared. Returns (CheckReport, the first call's visible
    output)."""
    c, seed, family, inputs, pristine = case.c, case.seed, case.family, case.inputs, case.pristine
    ref, secs, prefix, atol, rtol = case.ref, case.secs, case.prefix, tol.atol, tol.rtol
    key = c.key()
    seen = k.seen.setdefault(key, {})

    def report(tag=None, detail=None, fig=None, fig2=None):
        return CheckReport(config=key, seed=seed, family=family, passed=tag is None, tag=tag,
                           reason=f"{prefix}: {detail}" if tag else None, figures=fig, after_figures=fig2,
                           reference_seconds=secs)

    def repeat(i, out, fig):
        earlier = seen.get((i, checksum(out)))
        if earlier is None:
            return None
        return "degenerate", (f"{fig.output or 'output'} is bit-identical to seed {earlier[0]} family "
                              f"{earlier[1]}'s although the inputs changed (a result cached by shape or pointer?): "
                              f"{fig.summary()}")

    if first.tag:
        return report(first.tag, first.detail, first.figures), first.visible
    wl = k.workload
    first = check_output(first.visible, pristine, c, workload=wl, atol=atol, rtol=rtol, ref=ref, repeat=repeat)
    if first.tag:
        return report(first.tag, first.detail, first.figures), first.visible
    second = call_checks(k.fn, c, inputs, _new_outs(wl, c, device), pristine, workload=wl)
    same = second.tag is None and all(bits_equal(b, a) for b, a in zip(second.visible, first.visible))
    if same:
        # Bit for bit the first call's output: the same figures against the same reference,
        # judged above, and nothing to disagree on (issue 32: the gate's most common case,
        # compared once instead of three times).
        second = Checked(None, None, second.visible, first.figures, ref, 0.0)
    elif second.tag is None:
        second = check_output(second.visible, pristine, c, workload=wl, atol=atol, rtol=rtol, ref=ref,
                              mismatch="stale_mismatch", nonfinite="stale_mismatch", flat=False)
    _restore(second, inputs, pristine)
    if second.tag:
        why = ("second call: " if second.tag in CALL_TAGS else
               "first call passed, second call (fresh buffers, after the reference ran) fails: ")
        return report(second.tag, why + second.detail, first.figures, second.figures), first.visible
    dis = None if same else _disagreements(first.visible, second.visible, ref, wl, c, atol, rtol)
    if dis:
        return report("stale_mismatch", dis, first.figures, second.figures), first.visible
    return report(fig=first.figures, fig2=second.figures), first.visible


class BoundaryMemo:
    """Boundary cases already judged, for the configs of one sweep that share them.

    The boundary configs (``Workload.boundary_configs``: attention's are the main config with
    another seq_len) are shared by every config of a line that differs only on the axes they
    replace (for attention, seq_len): the same kernel
    on the same inputs (seed, family, shape) under the same tolerances and numeric state is
    the same case, and judging it again at the next config repeats identical work (issue 32:
    three quarters of a config's gate cases). A memo lives as long as its process (a worker
    runs many configs) and is keyed by the kernel's function object, so a kernel re-imported
    or redefined is judged afresh. The caller forgets a kernel (``forget``) whose gate changed
    global numeric state, so its boundary calls run, and are caught, again.
    """

    def __init__(self):
        self._done: dict = {}  # key -> (config key it was judged at, its reports)

    @staticmethod
    def _key(fn, c, pol: GatePolicy):
        return fn, c.key(), pol.seeds, pol.families, float(pol.atol), float(pol.rtol), str(pol.device)

    def get(self, fn, c, pol: GatePolicy) -> tuple[CheckReport, ...] | None:
        """The kernel's reports at boundary config ``c`` under ``pol``, marked with where they
        were judged (no reference seconds: none were spent here), or None."""
        hit = self._done.get(self._key(fn, c, pol))
        if hit is None:
            return None
        where, reports = hit
        return tuple(dataclasses.replace(r, reused_from=r.reused_from or where, reference_seconds=0.0)
                     for r in reports)

    def put(self, fn, c, pol: GatePolicy, where: str, reports) -> None:
        self._done[self._key(fn, c, pol)] = (where, tuple(reports))

    def forget(self, fn) -> None:
        for key in [k for k in self._done if k[0] is fn]:
            del self._done[key]


@dataclass(frozen=True)
class GateRun:
    """The gate of several kernels at one config: each kernel's result, and the seconds spent
    in the float64 references they shared (counted once)."""

    results: dict
    reference_seconds: float


def gate(spec, cfg, *, workload, **policy) -> GateResult:
    """Check ``spec`` at ``cfg`` and its boundary configs for every seed × family, under the
    ``GatePolicy`` of ``policy`` (seeds, atol, rtol; families, None: the workload's default
    ones; device; min_pass_rate).

    A seed passes if every check of it passes; the gate passes if the share of passing
    seeds reaches ``min_pass_rate`` and no failure is structural (STRUCTURAL_TAGS).
    """
    pol = GatePolicy(**policy)
    return gate_kernels((spec,), cfg, pol, workload=workload).results[spec_parts(spec)[1]]


def _boundary_note(bc, cfg) -> str:
    """How a boundary config's reasons name it: the axes it changes (`` (boundary seq_len 67)``)."""
    at = cfg.axes()
    return f" (boundary {', '.join(f'{a} {v}' for a, v in bc.axes().items() if at.get(a) != v)})"


def gate_kernels(specs, cfg, pol: GatePolicy, *, workload, around: Callable[[str | None], ContextManager] | None = None,
                 memo: BoundaryMemo | None = None) -> GateRun:
    """``gate`` for several kernels at once under ``pol``, case by case: for each (config, seed,
    family) the inputs are drawn once, every kernel makes its first call before the reference
    exists, the one float64 reference is computed, then each kernel's output is judged and its
    second call made on fresh buffers. Each kernel is judged exactly as if gated alone; the
    inputs and references, the bulk of the gate's time, are paid once per case rather than
    once per kernel (issue 32).

    ``around(name)`` wraps each stretch of one kernel's work (its calls and their checks),
    ``around(None)`` the shared work (inputs, references): the sweep reports its phase
    there and pins, and checks, the line's numeric state around each kernel.

    ``memo``: boundary cases judged at an earlier config of the sweep are taken from it
    (marked ``reused_from``) instead of run again; those judged here are put in it.
    """
    import torch

    dev_type = torch.device(pol.device).type
    for spec in specs:
        name = spec_parts(spec)[1]
        if hasattr(spec, "unusable_reason") and spec.unusable_reason(dev_type):
            raise UserError(f"kernel '{name}' cannot run here: {spec.unusable_reason(dev_type)}")
        if hasattr(spec, "config_reason") and spec.config_reason(cfg):
            raise UserError(f"kernel '{name}' cannot be gated at {cfg.key()}: {spec.config_reason(cfg)}")
    names = [spec_parts(spec)[1] for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"gate_kernels gates each kernel once, got {names}")
    t_start = time.perf_counter()
    pol = pol.of(workload)
    configs = [(cfg, ""), *((bc, _boundary_note(bc, cfg)) for bc in workload.boundary_configs(cfg))]
    run = _Gating([_Kernel(spec, configs, workload) for spec in specs], pol, around, workload)
    for c, note in configs:
        _gate_config(run, c, note, cfg, memo)
    if dev_type == "cuda":
        _side_streams(run, cfg)
    shared = (time.perf_counter() - t_start - sum(run.spent.values())) / len(run.kernels)
    return GateRun({k.name: _result(k, cfg, pol, run.spent[k.name] + shared) for k in run.kernels}, run.ref_total)


class _Gating:
    """One gate_kernels call as it runs: its kernels, the seconds each spent on its own work
    (``on(k)``; ``on(None)``: the shared work) and the seconds of the shared references."""

    def __init__(self, kernels: list[_Kernel], pol: GatePolicy, around, workload):
        self.kernels, self.pol, self.workload = kernels, pol, workload
        self.around = around or (lambda name: contextlib.nullcontext())
        self.spent = {k.name: 0.0 for k in kernels}
        self.ref_total = 0.0

    @contextlib.contextmanager
    def on(self, k: _Kernel | None):
        t0 = time.perf_counter()
        with self.around(None if k is None else k.name):
            yield
        if k is not None:
            self.spent[k.name] += time.perf_counter() - t0


def _gate_config(run: _Gating, c, note: str, cfg, memo: BoundaryMemo | None) -> None:
    """Every case at config ``c`` (``note``: how its reasons name it) for the kernels that run
    there; with a ``memo``, a boundary config's cases (``c`` is not the gated ``cfg``) are
    taken from it where judged before, and put in it."""
    pol, device = run.pol, run.pol.device
    remembered = memo is not None and c is not cfg
    runners = [k for k in run.kernels if c in k.configs]
    if remembered:
        for k in list(runners):
            kept = memo.get(k.fn, c, pol)
            if kept is not None:
                k.reports.extend(kept)
                runners.remove(k)
    if not runners:
        return
    first_report = {k.name: len(k.reports) for k in runners}
    for seed in pol.seeds:
        for fam in pol.families:
            with run.on(None):
                pristine = tuple(run.workload.make_inputs(c, seed, fam, device))
                first_set = tuple(t.clone() for t in pristine)
            firsts = {}
            for k in runners:
                with run.on(k):
                    firsts[k.name] = _first(k, c, first_set, pristine, device)
            ref, secs = None, 0.0
            with run.on(None):
                if any(f.tag is None for f in firsts.values()):
                    ref, secs = timed_reference(pristine, c, run.workload)
                    run.ref_total += secs
                # Second calls: fresh allocations while the first calls' are still alive.
                second_set = tuple(t.clone() for t in pristine)
            case = _Case(c, seed, fam, second_set, pristine, ref, secs, f"seed {seed} family {fam}{note}")
            for k in runners:
                with run.on(k):
                    rep, visible = _judge_case(k, case, firsts.pop(k.name), pol.tol, device)
                    k.reports.append(rep)
                    if visible is not None:
                        seen = k.seen.setdefault(c.key(), {})
                        for i, out in enumerate(visible):
                            seen.setdefault((i, checksum(out)), (seed, fam))
                    del visible
            del ref, first_set, second_set, pristine, case
    if remembered:
        for k in runners:
            memo.put(k.fn, c, pol, cfg.key(), k.reports[first_report[k.name]:])


def _side_streams(run: _Gating, cfg) -> None:
    """On CUDA: each kernel's side-stream check on the first seed and family at ``cfg``."""
    pol, device, wl = run.pol, run.pol.device, run.workload
    seed, fam = pol.seeds[0], pol.families[0]
    with run.on(None):
        pristine = wl.make_inputs(cfg, seed, fam, device)
    for k in run.kernels:
        with run.on(k):
            inputs = tuple(t.clone() for t in pristine)
            tag = "side_stream"
            try:
                why = side_stream_check(k.fn, inputs, _new_outs(wl, cfg, device), cfg=cfg, workload=wl)
            except Exception as exc:
                why, tag = exception_text(exc), "exception"
            del inputs
            k.reports.append(CheckReport(config=cfg.key(), seed=seed, family=fam, passed=why is None,
                                         tag=tag if why else None,
                                         reason=f"seed {seed} family {fam}: {why}" if why else None,
                                         figures=None, after_figures=None, reference_seconds=0.0,
                                         phase="side_stream_check"))
    del pristine


def _result(k: _Kernel, cfg, pol: GatePolicy, seconds) -> GateResult:
    seeds, families, atol, rtol, min_pass_rate = pol.seeds, pol.families, pol.atol, pol.rtol, pol.min_pass_rate
    reports = k.reports
    seed_ok = {s: all(r.passed for r in reports if r.seed == s) for s in seeds}
    n_ok = sum(seed_ok.values())
    rate = n_ok / len(seeds)
    fails = [r for r in reports if not r.passed]
    structural = any(r.tag in STRUCTURAL_TAGS for r in fails)
    return GateResult(
        kernel=k.name, config=cfg.key(), passed=rate >= min_pass_rate and not structural, pass_rate=rate,
        n_seeds=len(seeds), n_seeds_passed=n_ok, min_pass_rate=min_pass_rate, seeds=seeds, families=families,
        boundary_configs=tuple(c.key() for c in k.configs[1:]), skipped_configs=tuple(k.skipped),
        atol=float(atol), rtol=float(rtol), reports=tuple(reports),
        reason=fails[0].reason if fails else None, tag=fails[0].tag if fails else None,
        reference_seconds=sum(r.reference_seconds for r in reports), seconds=seconds)
