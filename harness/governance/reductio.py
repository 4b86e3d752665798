"""The reductio of a bar: each clause against the measured ceilings of the devices it runs on.

An impossible figure is caught at the brief stage, by arithmetic, not after a night of data
(seed 004): ``min(tflops) >= 1e6`` on a device whose matmuls measurably reach 780 TFLOP/s
can be refused before any kernel runs. So can a bar that cannot decide at all
(harness/governance/decide.py), whatever the device.

``at_register`` (``bench register``) checks, in turn:

1. what the bar and the ``[verify]`` clauses can decide from their metrics' nature alone
   (a share, a count, a positive number, a counter's range, and what any timed call can
   physically read: ``natural``) — never waived;
2. the reductio: a ``*_frac`` is at most 1 on every device, and every device of
   ``ledger/_device_ceilings.jsonl`` (its latest row per fingerprint) on which all the
   line's kernels run bounds each metric by its measured ceilings (``device_bounds``).
   With none known, the row says so and the sweep checks the device it runs on.

``before_sweep`` (``bench sweep``, once the device's ceilings are known — measured first
when missing) checks that device. A refusal is one ``UserError`` (exit 2) with the
arithmetic; ``[bar] beyond_ceiling_ok = "why"`` waives step 2, and row 0 records the
waiver with what it waived.

What a metric can be at one (config, candidate) on a device, from the physical floor of
one call (harness/measurement/floor.py), with ``BAR_MARGIN``:

- ``tflops``, ``gbps``, ``kv_gbps``: at most FLOPs, min_bytes, kv_bytes over the floor of the
  sustained phase (rates come from it; cold on a GPU, do_bench flushes); a ``*_frac`` at
  most that over the ceiling (``Ceilings.fractions``), and at most 1;
- ``ms``: at least that floor; ``interleaved_ms``, ``baseline_ms``, ``control_ms``: at least
  the floor in the line's timing mode;
- ``speedup``, ``speedup_ci_low``: at most the baseline's own measured time over that floor —
  the slowest ``baseline_ms`` recorded for the config on the device, in the line's timing
  mode, by a line registered with the same ``[numerics]`` (no such row: no bound);
- every ratio of two calls' medians (``RATIOS``, a speedup over a peer): from the floor over
  the longest call (``longest_call_ms``) to the longest over the floor — limits, as
  ``natural``'s are on any device;
- ``sm_mhz``, ``power_w``, ``cycles``, ``tflops_at(F)``: no value on a CPU (NVML);
- ``tflops_at(F)``: at most the dtype's matmul ceiling scaled to F — the ceiling over the SM
  clock it was measured at (its work per cycle, ``Ceilings.per_mhz``) × F; ``cycles``: at least
  the config's FLOPs at that work per cycle. A ceilings row without the clock (measured
  before it was recorded) bounds neither;
- ``[verify]``: ``duration_us`` at least the cold floor (ncu flushes caches), ``dram_read_bytes``
  at least what ``counters.counter_impossible`` allows (with the device's L2 known).

A cache whose size is unknown is taken to hold every byte (``UNKNOWN_CACHE_BYTES``): a bound
must only refuse the impossible.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError, plural, shown
from harness.governance.decide import Bound, Finding, decide
from harness.vocab.devices import ceilings_name, same_gpu_model
from harness.vocab.metrics import BY_NAME, SM_CLOCK_METRICS, STEP_NAMES
from harness.measurement.floor import CPU_CACHE_DEFAULT_BYTES, FLOOR_MARGIN
from harness.measurement import floor as physical
from harness.measurement.ceilings import Ceilings
from harness.measurement.timing.sustained import rates
from harness.execution.executor import phase_limit
from harness.pipeline.phase import TIMING
from harness.measurement.counters import COUNTER_RANGES, L2_ALLOWANCE
from harness.registration.verify import BARE_PREFIX, names, possible
from harness.ledger.store import Ledger, recorded
from harness.ledger.format import CEILINGS_LEDGER
from harness.ledger.line_payloads import ReductioDevice, RegistrationSummary
from harness.ledger.payloads import CeilingsRef, Env, Metrics, Policy
from harness.vocab.outcomes import REGISTERED, RESULT
from harness.registry import get_kernel, get_workload
from harness.registration.schema import KEY_SCHEMA
from harness.registration.integration import amdahl_refusal, ceiling

# A bar is held to the measured ceilings themselves on a GPU: a clause that needs more than
# the device measurably does is refused unless [bar] beyond_ceiling_ok says why it may.
# On the CPU the "ceilings" are short host measurements that read up to 80x apart between
# runs on a shared host; only what the per-call floor already calls impossible there (its
# CPU margin, floor.FLOOR_MARGIN["cpu"]) is refused.
GPU_BAR_MARGIN = 0.0
CEILINGS_FILE = "ledger/_device_ceilings.jsonl"
RATES = ("tflops", "gbps", "kv_gbps")
FRACTIONS = {"tflops_frac": "tflops", "gbps_frac": "gbps", "kv_gbps_frac": "kv_gbps"}
SUSTAINED_TIMES = ("ms",)
ROUND_TIMES = ("interleaved_ms", "baseline_ms", "control_ms")
# The speedup's upper CI end has no such bound: a bootstrap end, not a ratio of medians. The
# next-run interval's lower end lies below the speedup (governance/nextrun.py: its half-width is
# never 0, the between-run floor), so the speedup's bound holds it too.
SPEEDUPS = ("speedup", "speedup_ci_low", "speedup_next_low")
GAINS = ("step_gain", "step_gain_predicted")
# Ratios of two timed calls' medians (a bootstrap end of one too): a speedup (or one over a
# peer candidate, ``speedup vs "P"``) and the control.
RATIOS = ("speedup", "speedup_ci_low", "speedup_ci_high", "control")
HOST_TIMES = ("host_us", "baseline_host_us")  # µs, within the call's timing phase
FRACTION_WHY = "a fraction of the device's measured ceiling is at most 1"
WAIVER_KEY = "beyond_ceiling_ok"
# The shortest time a timed call can read: one tick of perf_counter_ns (1 ns), the finest clock
# any bench timer reads (measurement/timing/timers.py; CUDA events resolve about 0.5 µs). A
# call that passed the gate did its work, which takes longer than that on any device.
TICK_MS = 1e-6
TICK_WHY = f"{TICK_MS:g} ms, one tick of perf_counter_ns"


def bar_margin(kind: str) -> float:
    """How far past the floor a call may go before a bar needing it is refused (module doc)."""
    return FLOOR_MARGIN["cpu"] if kind == "cpu" else GPU_BAR_MARGIN


def unknown_cache_bytes() -> int:
    """Cache size assumed where none is recorded: larger than any cache, so the floor counts
    every byte as possibly held (measurement.floor.CPU_CACHE_DEFAULT_BYTES)."""
    return CPU_CACHE_DEFAULT_BYTES


@dataclass(frozen=True)
class Device:
    """One device a line may run on: its ceilings row and the baseline's recorded times there."""

    row: dict  # the ceilings row of ledger/_device_ceilings.jsonl
    baseline_ms: dict = field(default_factory=dict)  # config key -> (slowest recorded ms, where)

    @property
    def name(self) -> str:
        return ceilings_name(self.row)

    @property
    def label(self) -> str:
        return f"{self.name} ({CEILINGS_FILE} row {self.row.seq})"

    def record(self) -> dict:
        return {"device": self.name, "kind": self.row.device, "ceilings_ref": {
            "seq": self.row.seq, "hash": self.row.hash}, "baseline_times": len(self.baseline_ms)}


def _floors(dev: Device, reg, cfg):
    """(sustained-phase floor, interleaved-rounds floor) of one call of ``cfg`` on ``dev``."""
    ceil = Ceilings.from_row(dev.row)
    l2 = Env.from_row(dev.row.env or {}).l2_bytes
    if ceil.device == "cuda" and isinstance(l2, int) and l2 >= 0:
        cache, source = l2, "L2 (the ceilings row's env)"
    else:
        cache, source = unknown_cache_bytes(), "unknown: every byte taken as cached"
    margin = bar_margin(ceil.device)
    rounds_mode = reg.timing.mode if ceil.device == "cuda" else "host"
    sustained_mode = "cold" if ceil.device == "cuda" else "host"
    wl = get_workload(reg.workload)
    return (physical.floor(cfg, ceil, sustained_mode, cache, source, margin, workload=wl),
            physical.floor(cfg, ceil, rounds_mode, cache, source, margin, workload=wl))


def device_bounds(reg, dev: Device | None):
    """``(metric, config, candidate, peer) -> Bound``: what a metric can be on ``dev`` (module
    doc), within its ``natural`` bounds; with no device, also that a fraction of a ceiling is
    at most 1."""
    ceil = Ceilings.from_row(dev.row) if dev is not None else None
    cache: dict = {}
    nature = natural(reg)
    longest = longest_call_ms(reg)
    wl = get_workload(reg.workload)

    def bound(metric: str, cfg, cand: str, peer: str | None = None, at: float | None = None) -> Bound:
        b = nature(metric, cfg, cand, peer, at)
        if metric in STEP_NAMES:  # a model step's: no device ceiling bounds it
            return b
        if metric in FRACTIONS:
            b = b.at_most(1.0, FRACTION_WHY)
        if dev is None:
            return b
        if BY_NAME[metric].needs == "nvml" and ceil.device == "cpu":
            return Bound(absent=f"{metric} is read through NVML: none on {dev.name}")
        if metric in SM_CLOCK_METRICS:
            return _per_cycle(b, metric, cfg, at, ceil, dev.name, wl.flops(cfg))
        if cfg.key() not in cache:
            cache[cfg.key()] = _floors(dev, reg, cfg)
        sus, rnd = cache[cfg.key()]
        if metric in RATES or metric in FRACTIONS:
            top = rates(cfg, sus.limit_ms, wl)
            rate = FRACTIONS.get(metric, metric)
            unit = BY_NAME[rate].unit
            if top[rate] is None:
                return Bound(absent=f"workload '{wl.name}' declares no bytes for {rate}")
            why = (f"{rate} at most {top[rate]:.4g} {unit} (its work in the shortest call {dev.name} allows, "
                   f"{sus.limit_ms:.4g} ms; {sus.arithmetic()})")
            if metric in RATES:
                return b.at_most(top[rate], why)
            frac = ceil.fractions(top, cfg.dtype)[metric]
            if frac is None:
                return Bound(absent=f"{dev.name} has no {cfg.dtype} matmul ceiling")
            return b.at_most(frac, f"{why}, over the ceiling")
        if metric in SUSTAINED_TIMES or metric in ROUND_TIMES:
            fl = sus if metric in SUSTAINED_TIMES else rnd
            return b.at_least(fl.limit_ms, f"the shortest call {dev.name} allows: {fl.arithmetic()}")
        if metric in RATIOS and rnd.limit_ms > 0:
            # Each call of the ratio lasts at least the device's floor and at most the watchdog.
            lo, hi = rnd.limit_ms / longest, longest / rnd.limit_ms
            b = b.at_least(lo, f"no call shorter than {rnd.limit_ms:.4g} ms on {dev.name} ({rnd.arithmetic()}) over "
                               f"none longer than {longest:.4g} ms (timeout_s + watchdog_s) = {lo:.4g}", limit=True)
            b = b.at_most(hi, f"no call longer than {longest:.4g} ms (timeout_s + watchdog_s) over none shorter than "
                              f"{rnd.limit_ms:.4g} ms on {dev.name} = {hi:.4g}", limit=True)
        if metric in SPEEDUPS and peer is None and cfg.key() in dev.baseline_ms:
            base, where = dev.baseline_ms[cfg.key()]
            top = base / rnd.limit_ms
            return b.at_most(top, f"the baseline's measured {base:.4g} ms ({where}) over the shortest call "
                                  f"{dev.name} allows, {rnd.limit_ms:.4g} ms, is {top:.4g} ({rnd.arithmetic()})")
        return b

    return bound


def longest_call_ms(reg) -> float:
    """The longest one timed call of the line can last: the watchdog ends a kernel's timing
    phase past ``timeout_s + watchdog_s`` (execution/executor.py ``phase_limit``)."""
    return phase_limit(TIMING, reg.timing) * 1e3


def natural(reg):
    """``(metric, config, candidate, peer) -> Bound``: what a metric can be by its nature and the
    line's timing alone, on any device. Every timed call lasts from one timer tick
    (``TICK_MS``) to the watchdog's end (``longest_call_ms``): a time is within those, a ratio
    of two calls' medians (a speedup, over the baseline or a peer, its CI ends, the control)
    within their ratios, a rate at least its work over the longest; a host enqueue time within
    the call's phase. Those ends are physical limits (``Bound.hi_limit``), never reached by a
    kernel: a threshold past them decides nothing. A rate's upper end is a device's
    (``device_bounds``, waivable): a tick bounds it too loosely to be worth a refusal no waiver
    lifts. A step gain, baseline over candidate minus 1, is above −1."""
    longest = longest_call_ms(reg)
    within = f"timeout_s {reg.timing.timeout_s:g} + watchdog_s {reg.timing.watchdog_s:g}"
    wl = get_workload(reg.workload)

    def bound(metric: str, cfg, cand: str, peer: str | None = None, at: float | None = None) -> Bound:
        if metric in GAINS:
            return Bound(lo=-1.0, why_lo="a gain of baseline over candidate minus 1 is above −1")
        b = Bound()
        if metric in RATIOS:
            lo, hi = TICK_MS / longest, longest / TICK_MS
            b = b.at_least(lo, f"no call shorter than {TICK_WHY}, over none longer than {longest:.4g} ms ({within} "
                               f"s) = {lo:.4g}", limit=True)
            return b.at_most(hi, f"no call longer than {longest:.4g} ms ({within} s) over none shorter than "
                                 f"{TICK_WHY} = {hi:.4g}", limit=True)
        if metric in SUSTAINED_TIMES or metric in ROUND_TIMES:
            b = b.at_least(TICK_MS, f"no call is shorter than {TICK_WHY}", limit=True)
            return b.at_most(longest, f"no call is longer than {within} s", limit=True)
        if metric in HOST_TIMES:
            return b.at_most(longest * 1e3, f"no enqueue is longer than its call's phase, {within} s", limit=True)
        if metric in RATES:  # its upper end is a device's (device_bounds): its ceilings, waivable
            least = rates(cfg, longest, wl)[metric]
            if least is not None and least > 0:
                b = b.at_least(least, f"its work in a call of at most {longest:.4g} ms ({within} s) is {least:.4g} "
                                      f"{BY_NAME[metric].unit}", limit=True)
        return b

    return bound


def _per_cycle(b: Bound, metric: str, cfg, at: float | None, ceil, name: str, flops: float) -> Bound:
    """``tflops_at(at)`` at most, or ``cycles`` at least, what the dtype's matmul ceiling does
    per cycle allows (module doc); ``b`` unchanged where the ceilings hold no clock."""
    per = ceil.per_mhz(cfg.dtype)
    if per is None:
        return b
    scale = 1.0 + bar_margin(ceil.device)
    why = f"the {cfg.dtype} matmul ceiling on {name} does {per:.4g} TFLOP/s per MHz of the SM clock it ran at"
    if metric == "tflops_at":
        return b.at_most(per * at * scale, f"{why}: {per * at:.4g} TFLOP/s at {at:g} MHz")
    least = flops / (per * 1e9) / scale  # TFLOP/s per MHz is 1e6 FLOPs per cycle; kcycles
    return b.at_least(least, f"{why}: {flops:.4g} FLOPs take at least {least:.4g} kcycles")


# --------------------------------------------------------------------------- [verify]


def _verify_ranges(reg, cfg, dev: Device | None) -> tuple[dict, dict]:
    """(name -> (lo, hi), name -> why) of the [verify] names at ``cfg``, on ``dev`` if given."""
    env = {**COUNTER_RANGES, **{BARE_PREFIX + k: r for k, r in COUNTER_RANGES.items()}}
    wl = get_workload(reg.workload)
    for name in ("min_bytes", "min_read_bytes", "kv_bytes", "flops"):
        v = getattr(wl, name)(cfg)
        if v is not None:
            env[name] = (float(v), float(v))
    why: dict = {}
    if dev is not None and dev.row.device == "cuda":
        sus, _ = _floors(dev, reg, cfg)
        env["duration_us"] = (sus.limit_ms * 1e3, math.inf)
        why["duration_us"] = f"the shortest call {dev.name} allows: {sus.arithmetic()}"
        l2 = Env.from_row(dev.row.env or {}).l2_bytes
        if isinstance(l2, int):
            least = max(0.0, wl.min_read_bytes(cfg) - L2_ALLOWANCE * l2)
            env["dram_read_bytes"] = (least, math.inf)
            why["dram_read_bytes"] = (f"{_input_names(wl, cfg)} ({wl.min_read_bytes(cfg):.4g} B) less {L2_ALLOWANCE:g} × "
                                      f"L2 ({l2} B)")
    return env, why


def _input_names(wl, cfg) -> str:
    """The workload's inputs as a reason names them: ``q, k and v``."""
    names = [t.name for t in wl.inputs(cfg)]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def verify_finding(reg, pairs, dev: Device | None) -> Finding | None:
    """Why a [verify] clause cannot decide (on ``dev``): it can never hold at some pair (no
    GO is possible), or it holds at every pair whatever the counters read."""
    where = f" on {dev.label}" if dev is not None else ""
    if dev is not None and dev.row.device != "cuda":
        return None  # counters are read on GPUs only
    for clause in reg.verify_clauses:
        always = True
        for cfg, cand in pairs:
            env, why = _verify_ranges(reg, cfg, dev)
            holds, fails = possible(clause, env)
            if not holds:
                used = ", ".join(f"{n} in [{env[n][0]:.4g}, {env[n][1]:.4g}]" + (f" ({why[n]})" if n in why else "")
                                 for n in sorted(names(clause)))
                return Finding("never_go", f"[verify] clause `{clause.text}` can never hold{where} at "
                                           f"{cfg.key()} {cand}: with {used}")
            always = always and not fails
        if always:
            return Finding("always_go", f"[verify] clause `{clause.text}` holds whatever the counters "
                                        f"read{where}, at every registered pair: it can never change the outcome")
    return None


# --------------------------------------------------------------------------- devices


def pairs_of(reg) -> list[tuple]:
    """The registered (config, candidate) pairs."""
    return [(cfg, cand) for cfg in reg.configs for cand in reg.candidates]


def _ceilings_rows(root: Path) -> list[dict]:
    return Ledger(root, CEILINGS_LEDGER).rows()


def _measured_on(row: dict, fingerprint: dict, ceilings: dict) -> bool:
    """Whether a result row was measured on the device of ``fingerprint``: by the ceilings row
    it names, else (rows older than ceilings_ref) by GPU model."""
    ref = CeilingsRef.from_row(row.ceilings_ref)
    if ref is not None and ref.seq in ceilings:
        return ceilings[ref.seq].fingerprint == fingerprint
    return same_gpu_model(row.env or {}, fingerprint)


def baseline_times(root: Path, reg, ceilings_row) -> dict:
    """config key -> (the slowest recorded baseline_ms, where): every result row of any line
    with this baseline, config and timing mode, on this device, registered with the same
    [numerics] pins (the times the baseline itself can be expected to take)."""
    fingerprint = ceilings_row.fingerprint
    ceilings = {r.seq: r for r in _ceilings_rows(root)}
    keys = {cfg.key() for cfg in reg.configs}
    pins = dict(reg.raw.get("numerics", {}))
    out: dict = {}
    for name, rows in recorded(root):
        if name == f"{CEILINGS_LEDGER}.jsonl" or not rows or rows[0].kind != REGISTERED:
            continue
        if dict(RegistrationSummary.from_row(rows[0].registration or {}).numerics or {}) != pins:
            continue
        for row in rows:
            if row.kind != RESULT:
                continue
            key = row.config_key
            if (row.baseline != reg.baseline or key not in keys
                    or Policy.from_row(row.policy or {}).mode != reg.timing.mode
                    or not _measured_on(row, fingerprint, ceilings)):
                continue
            ms = Metrics.from_row(row.metrics or {}).baseline_ms
            if isinstance(ms, (int, float)) and math.isfinite(ms) and ms > out.get(key, (0.0,))[0]:
                out[key] = (float(ms), f"ledger/{name} row {row.seq}")
    return out


def known_devices(root: Path, reg) -> tuple[list[Device], list[dict]]:
    """(devices the line runs on, devices it cannot run on): the latest ceilings row per
    fingerprint, split by whether every kernel of the line runs on its kind of device."""
    latest: dict = {}
    for row in _ceilings_rows(root):
        latest[json.dumps(row.fingerprint, sort_keys=True)] = row
    kinds = [set(get_kernel(k).devices) for k in (reg.baseline, *reg.candidates)]
    runs, skipped = [], []
    for row in latest.values():
        if all(row.device in k for k in kinds):
            runs.append(Device(row, baseline_times(root, reg, row)))
        else:
            skipped.append({"device": Device(row).name, "why": f"the line's kernels do not all run on {row.device}"})
    return runs, skipped


# --------------------------------------------------------------------------- entry points


def _refusal(reg, finding: Finding, *, reductio: bool, registered: bool = False) -> UserError:
    table = "" if finding.text.startswith("[verify]") else "[bar] "
    waiver = f"[bar] {WAIVER_KEY} = \"<why>\" (schema = {KEY_SCHEMA[('bar', WAIVER_KEY)]})"
    if registered:
        fix = (f"register the bar this device can meet as a new line (amends = \"{reg.line}\"), or, if the ceiling is "
               f"wrong for it, with {waiver}")
    elif reductio:
        fix = f"fix the bar, or, if the ceiling is wrong for this line, waive the check with {waiver}"
    else:
        fix = "fix the bar: a registered bar is fixed for the life of the line"
    return UserError(f"{shown(reg.path)}: {table}{finding.text} — {fix}")


def _reductio(reg, devices: list) -> list[tuple[Device | None, Finding]]:
    pairs = pairs_of(reg)
    out = []
    for dev in devices:
        where = f" on {dev.label}" if dev is not None else ""
        f = decide(reg.bar, pairs, device_bounds(reg, dev), where) or verify_finding(reg, pairs, dev)
        if f is not None:
            out.append((dev, f))
    return out


def at_register(root: Path, reg) -> dict:
    """Refuse a bar that cannot decide, or that needs more than a known device measurably does
    (unless waived); return what was checked, for the `registered` row."""
    amdahl = amdahl_refusal(reg)  # Amdahl is arithmetic on the stated share: never waived
    if amdahl is not None:
        raise UserError(f"{shown(reg.path)}: {amdahl}")
    pairs = pairs_of(reg)
    f = decide(reg.bar, pairs, natural(reg)) or verify_finding(reg, pairs, None)
    if f is not None:
        raise _refusal(reg, f, reductio=False)
    devices, skipped = known_devices(root, reg)
    found = _reductio(reg, devices or [None])
    if found and not reg.beyond_ceiling_ok:
        raise _refusal(reg, found[0][1], reductio=True)
    note = None
    if not devices:
        held = f"holds ceilings only of {', '.join(ReductioDevice.from_row(s).device for s in skipped)}, where the line does not run" \
            if skipped else "holds none"
        note = (f"no device's ceilings are known ({CEILINGS_FILE} {held}): the bar was checked for what it can "
                f"decide and against fractions of a ceiling only; `bench sweep` checks it against the device it "
                f"runs on before its first config")
    spec = reg.integration
    amdahl_row = ({"op_share": spec.op_share, "op_share_source": spec.op_share_source,
                   "ceiling": ceiling(spec.op_share)} if spec is not None and spec.op_share is not None else None)
    return {"checked": [d.record() for d in devices], "not_checked": skipped, "note": note,
            WAIVER_KEY: reg.beyond_ceiling_ok, "waived": [f.text for _, f in found],
            **({"amdahl": amdahl_row} if amdahl_row else {})}


def require_sm_clock(reg, device: str) -> None:
    """Refuse, before anything runs or is written, a sweep on a device without an SM clock (the
    CPU) of a line whose bar or primary names a figure had only from one (metrics.SM_CLOCK_METRICS):
    every such clause would stay unknown. Not waivable: no ceiling is wrong, the figure is absent."""
    if device.startswith("cuda"):
        return
    named = [(f"`{' '.join(c.text.split())}`", c.aggregate) for c in reg.bar.clauses()]
    named.append((f"primary `{reg.primary}`", reg.primary_aggregate))
    clock = [(what, agg.metric) for what, agg in named if agg.metric in SM_CLOCK_METRICS]
    if clock:
        what, metric = clock[0]
        raise UserError(f"{shown(reg.path)}: [bar] {what} needs {metric}, had only from the SM clock NVML reads on "
                        f"a GPU, and this sweep runs on the {device.upper()}, which has none: sweep line '{reg.line}' "
                        f"on a GPU, or register a bar without {' or '.join(sorted(SM_CLOCK_METRICS))} as a new line "
                        f"(amends = \"{reg.line}\")")


def before_sweep(root: Path, reg, ceilings_row) -> str:
    """Refuse (unless waived) a bar that needs more than the sweep's device measurably does;
    the sentence the sweep's summary shows. A line registered before bench checked what a bar
    can decide is not refused for that here (its bar is fixed): the sentence says so."""
    pairs = pairs_of(reg)
    undecided = decide(reg.bar, pairs, natural(reg)) or verify_finding(reg, pairs, None)
    if undecided is not None:
        return f"reductio not run: {undecided.text} (registered before bench checked bars for this)"
    dev = Device(ceilings_row, baseline_times(root, reg, ceilings_row))
    found = _reductio(reg, [dev])
    if found and not reg.beyond_ceiling_ok:
        raise _refusal(reg, found[0][1], reductio=True, registered=True)
    if found:
        return (f"reductio on {dev.label} waived ([bar] {WAIVER_KEY} = {json.dumps(reg.beyond_ceiling_ok)}): "
                f"{found[0][1].text}")
    return f"reductio: the bar can be met on {dev.label} ({plural(len(dev.baseline_ms), 'recorded baseline time')})"
