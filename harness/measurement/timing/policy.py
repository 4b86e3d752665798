"""The timing policy: every knob of the protocol, its defaults, and the cache sizing rules."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from harness.errors import UserError
from harness.measurement.stats import median_ci_min_n

MODES = ("cold", "hot", "graph")
# Policy defaults.
DEFAULT_MODE = "cold"
DEFAULT_WARMUP_MS = 250.0          # long enough for boost clocks to settle under load
DEFAULT_MIN_SAMPLES = 20           # kept rounds; the 95% median CI needs n ≥ 6 to exist at all
DEFAULT_MAX_SAMPLES = 2000         # rounds run (kept + dropped)
DEFAULT_MIN_TIME_MS = 200.0        # measured span, so slow drifts are sampled, not just a burst
DEFAULT_NOISE_TARGET = 0.005       # rel_noise: relative half-width of the median's 95% CI
DEFAULT_TIMEOUT_S = 60.0           # whole measure() call, warm-up included
DEFAULT_THROTTLE_THRESHOLD = 0.85  # drop a round whose min SM clock < 0.85 × reference
DEFAULT_MAX_DROP_FRACTION = 0.25   # more dropped rounds than this: the measurement is throttled
DEFAULT_CONTROL_TOLERANCE = 0.02   # control (= baseline function) must agree within ±2%
DEFAULT_GRAPH_REPLAYS = 0          # 0 = auto: enough replays per sample for GRAPH_TARGET_SAMPLE_MS
DEFAULT_LEAD_CALLS = 0             # untimed calls of the same arm just before each timed one
# What ends the rounds ([timing] stop, schedule 6; timing/criteria.py): "noise", every arm's
# median to noise_target (every line before schema 6), or "statistic", every bar quantity of
# the config (paired speedups, the control) to precision at error rate alpha.
STOPS = ("noise", "statistic")
DEFAULT_STOP = "noise"
# The statistic stop's keys: absent from a noise-stopped policy, so its rows read as before them.
STATISTIC_KEYS = ("stop", "precision", "alpha")
# 0.5%: the noise stop's target, now on the speedup itself: a speedup known to ±0.5% resolves a
# 2% bar (a clause's usual margin) with room for the control's own ±2%.
DEFAULT_PRECISION = 0.005
# 5%: the error rate the row's speedup CI has always had (stats.DEFAULT_CONFIDENCE = 95%).
DEFAULT_ALPHA = 0.05
# Above 0.5 the "interval" holds the statistic less often than not: no confidence anyone means.
MAX_ALPHA = 0.5
# Below one in a million each look's interval needs ever more rounds (24 at the first of 8 looks) for
# an error rate no bar decision is made at; it also keeps 1 − alpha/K a float below 1.
MIN_ALPHA = 1e-6
# A worker that spends longer than this in one phase of one kernel (gate, recheck; timing
# gets its own timeout_s on top) is killed and the pair recorded as crashed: a hung kernel
# costs minutes, not the night. Minutes, because the first call of a shape may compile.
DEFAULT_WATCHDOG_S = 600.0
LEAD_CALLS_MAX = 64
GRAPH_MAX_REPLAYS = 64             # the most calls one graph sample holds when chosen automatically

# Cache policy. Writing exactly L2 bytes does not guarantee eviction (the replacement policy
# is not strict LRU, and Hopper's L2 is two partitions with far-side copies), so the flush
# writes several × L2; the floor keeps small-L2 or misreported devices safely flushed.
L2_FLUSH_FACTOR = 4
FLUSH_FLOOR_BYTES = 256 * 2**20  # also triton.testing.do_bench's flush: sustained rates reproduce it
# Hot mode rotates inputs so the data touched between two uses of a slot exceeds L2 several times.
ROTATION_FACTOR = 4
MAX_ROTATION_SLOTS = 256           # caps graph count and allocations for tiny inputs
# Graph mode rotates inputs past the L2 as hot mode does when that takes at most this many
# copies: a memory-bound kernel is then read from HBM, not from an L2 its one copy would fit
# in. Each copy costs a captured graph per arm and chain start, so µs kernels on tiny inputs
# keep one L2-warm copy, as do_bench_cudagraph does; the row's n_slots says which.
GRAPH_MAX_ROTATION_SLOTS = 16


@dataclass(frozen=True)
class TimingPolicy:
    """Every knob of the protocol; validated on construction (UserError names key and fix)."""

    mode: str = DEFAULT_MODE
    warmup_ms: float = DEFAULT_WARMUP_MS
    min_samples: int = DEFAULT_MIN_SAMPLES
    max_samples: int = DEFAULT_MAX_SAMPLES
    min_time_ms: float = DEFAULT_MIN_TIME_MS
    noise_target: float = DEFAULT_NOISE_TARGET
    timeout_s: float = DEFAULT_TIMEOUT_S
    throttle_threshold: float = DEFAULT_THROTTLE_THRESHOLD
    max_drop_fraction: float = DEFAULT_MAX_DROP_FRACTION
    control_tolerance: float = DEFAULT_CONTROL_TOLERANCE
    graph_replays: int = DEFAULT_GRAPH_REPLAYS
    lead_calls: int = DEFAULT_LEAD_CALLS
    watchdog_s: float = DEFAULT_WATCHDOG_S
    stop: str = DEFAULT_STOP
    precision: float | None = None    # statistic stop only (DEFAULT_PRECISION when not given)
    alpha: float | None = None        # statistic stop only (DEFAULT_ALPHA when not given)

    def __post_init__(self):
        def num(key, lo, hi, *, integer=False, lo_open=False):
            v = getattr(self, key)
            ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
            if isinstance(v, bool) or not ok_type:
                kind = "an integer" if integer else "a number"
                raise UserError(f"timing policy '{key}' = {v!r}: must be {kind} (e.g. {getattr(TimingPolicy, key)})")
            if not math.isfinite(v) or (v <= lo if lo_open else v < lo) or v > hi:
                rng = f"{'(' if lo_open else '['}{lo}, {hi}]"
                raise UserError(f"timing policy '{key}' = {v!r}: must lie in {rng} "
                                f"(default {getattr(TimingPolicy, key)})")

        if self.mode not in MODES:
            raise UserError(f"timing policy 'mode' = {self.mode!r}: must be one of {', '.join(MODES)}")
        num("warmup_ms", 0, 1e7)
        num("min_samples", 1, 10**7, integer=True)
        num("max_samples", 1, 10**7, integer=True)
        num("min_time_ms", 0, 1e7)
        num("noise_target", 0, 1, lo_open=True)
        num("timeout_s", 0, 1e6, lo_open=True)
        num("throttle_threshold", 0, 1, lo_open=True)
        num("max_drop_fraction", 0, 1)
        num("control_tolerance", 0, 1, lo_open=True)
        num("graph_replays", 0, GRAPH_MAX_REPLAYS * 16, integer=True)
        num("lead_calls", 0, LEAD_CALLS_MAX, integer=True)
        num("watchdog_s", 0, 1e6, lo_open=True)
        if self.lead_calls and self.mode == "graph":
            raise UserError(f"timing policy 'lead_calls' = {self.lead_calls} with mode 'graph': a graph sample "
                            f"already replays many calls back to back; use lead_calls with mode cold or hot")
        if self.min_samples > self.max_samples:
            raise UserError(f"timing policy 'min_samples' = {self.min_samples} exceeds 'max_samples' = "
                            f"{self.max_samples}: raise max_samples or lower min_samples")
        self._check_stop(num)

    def _check_stop(self, num) -> None:
        """``stop`` and the statistic stop's keys: ``precision`` and ``alpha`` belong to it (filled
        with their defaults there), and its first look (min_samples rounds) must hold a CI."""
        if self.stop not in STOPS:
            raise UserError(f"timing policy 'stop' = {self.stop!r}: must be one of {', '.join(map(repr, STOPS))}")
        if self.stop == DEFAULT_STOP:
            for key in ("precision", "alpha"):
                if getattr(self, key) is not None:
                    raise UserError(f"timing policy '{key}' belongs to the statistic stop: set stop = \"statistic\" "
                                    f"or drop {key} (the noise stop's target is noise_target)")
            return
        for key, default in (("precision", DEFAULT_PRECISION), ("alpha", DEFAULT_ALPHA)):
            if getattr(self, key) is None:
                object.__setattr__(self, key, default)
        num("precision", 0, 1, lo_open=True)
        num("alpha", MIN_ALPHA, MAX_ALPHA)
        conf = look_confidence(self.alpha, len(looks(self.min_samples, self.max_samples)))
        need = median_ci_min_n(conf)
        if self.min_samples < need:
            raise UserError(f"timing policy 'min_samples' = {self.min_samples} is too few for the statistic stop's "
                            f"first look: its {conf:.4%} interval needs {need} rounds — raise min_samples to {need}")

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None) -> "TimingPolicy":
        """A policy from a registration's [timing] table; unknown keys are an error."""
        if d is not None and not isinstance(d, Mapping):
            raise UserError(f"[timing] must be a table of key = value, got {type(d).__name__}")
        d = dict(d or {})
        valid = [f.name for f in fields(cls)]
        for key in d:
            if key not in valid:
                raise UserError(f"unknown timing policy key '{key}': valid keys are {', '.join(valid)}")
        if d.get("stop") == "statistic" and "noise_target" in d:
            raise UserError("timing policy 'noise_target' is the noise stop's target; with stop = \"statistic\" the "
                            "rounds stop on 'precision': drop noise_target")
        return cls(**d)

    def as_dict(self) -> dict:
        """Every knob; a noise-stopped policy leaves out the statistic stop's keys, so its row's
        ``policy`` reads byte for byte as before they existed."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.stop == DEFAULT_STOP:
            for key in STATISTIC_KEYS:
                del d[key]
        return d


def looks(min_samples: int, max_samples: int) -> tuple[int, ...]:
    """The kept-round counts at which the statistic stop may stop for precision: min_samples,
    doubling, below max_samples (timing/criteria.py). A fixed geometric schedule: few looks
    (K grows with log2(max / min)), each a whole doubling of the evidence."""
    out, n = [], min_samples
    while n < max_samples:
        out.append(n)
        n *= 2
    return tuple(out)


def look_confidence(alpha: float, n_looks: int) -> float:
    """Each look's confidence: 1 − alpha / K over the K = n_looks + 1 intervals a measurement
    can report (one per look, and the one at its end, max_samples or timeout); by Bonferroni
    all K cover together with probability ≥ 1 − alpha, so the one reported does."""
    return 1 - alpha / (n_looks + 1)


def flush_bytes(l2_bytes: int) -> int:
    """Size of the cold-mode flush buffer for a device with ``l2_bytes`` of L2."""
    return max(L2_FLUSH_FACTOR * int(l2_bytes), FLUSH_FLOOR_BYTES)


def l2_flush(device: str):
    """The cold-mode flush on a CUDA ``device``: zeroes a buffer of ``flush_bytes`` of its L2
    (allocated once here); called before a timed call, outside its window."""
    import torch

    return torch.empty(flush_bytes(device_l2_bytes(device)), dtype=torch.uint8, device=device).zero_


def rotation_slots(bytes_per_slot: int, l2_bytes: int, *, factor: int = ROTATION_FACTOR,
                   max_slots: int = MAX_ROTATION_SLOTS) -> int:
    """Input copies so that n × bytes_per_slot ≥ factor × L2 (capped at ``max_slots``).

    When the cap binds (tiny inputs), residual L2 reuse remains: use mode 'cold' there.
    """
    if bytes_per_slot <= 0:
        raise ValueError(f"bytes_per_slot must be > 0, got {bytes_per_slot}")
    return max(1, min(max_slots, math.ceil(factor * l2_bytes / bytes_per_slot)))


def device_l2_bytes(device: str) -> int:
    """L2 size of a CUDA device as torch reports it."""
    import torch

    return int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
