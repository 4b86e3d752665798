"""What the checks return: a CheckReport per check, a GateResult per kernel and config (with
its ledger form), and the failure tags they carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.jsonsafe import jsonable
from harness.measurement.correctness.figures import ErrorFigures
from harness.vocab.outcomes import CLOCK_TAMPERED, FAILURE_TAGS

__all__ = ["CLOCK_TAMPERED", "FAILURE_TAGS", "CALL_TAGS", "STRUCTURAL_TAGS", "CheckReport", "GateResult"]

# Failures a pass-rate threshold never excuses: min_pass_rate < 1 tolerates numerical seed
# luck (shape-aware attention's causal config passed 21 of 40 seeds), not a kernel that
# skips, caches or corrupts.
STRUCTURAL_TAGS = frozenset({"unwritten", "input_mutated", "degenerate", "exception", "side_stream",
                             "stale_mismatch", "left_running", "numerics_changed", CLOCK_TAMPERED})
# Tags of the call checks (before any comparison with the reference).
CALL_TAGS = frozenset({"exception", "input_mutated", "side_stream", "left_running", "numerics_changed",
                       CLOCK_TAMPERED})
# Failures listed in full in GateResult.to_row(): the rest are counted by tag.
MAX_ROW_FAILURES = 20


@dataclass(frozen=True)
class Tolerance:
    """The comparison an output passes: |out − ref| ≤ atol + rtol·|ref|, element by element."""

    atol: float
    rtol: float


@dataclass(frozen=True)
class InputCase:
    """Which inputs a check draws: a seed and an input family (workloads/inputs.py)."""

    seed: int
    family: str


@dataclass(frozen=True)
class CheckReport:
    """One (config, seed, family) check of a kernel; ``figures`` are the first call's (of the
    output that decided, named in them where the call has several)."""

    config: str
    seed: int
    family: str
    passed: bool
    tag: str | None               # a FAILURE_TAGS key, None when passed
    reason: str | None            # one readable line, None when passed
    figures: ErrorFigures | None  # first call (before the reference existed) vs reference
    after_figures: ErrorFigures | None  # second call (fresh buffers, after the reference)
    reference_seconds: float
    phase: str = "gate"           # "gate", "recheck", "timed_output" or "side_stream_check"
    # A boundary case judged at another config of the sweep (that config's key), in this
    # process, with the same kernel, inputs, tolerances and numeric state: the same case, not
    # run twice (gate.BoundaryMemo). None: judged here.
    reused_from: str | None = None

    def as_dict(self) -> dict:
        return {"config": self.config, "seed": self.seed, "family": self.family, "phase": self.phase,
                "passed": self.passed, "tag": self.tag, "reason": self.reason,
                "figures": self.figures.as_dict() if self.figures else None,
                "after_figures": self.after_figures.as_dict() if self.after_figures else None,
                "reference_seconds": self.reference_seconds, "reused_from": self.reused_from}


@dataclass(frozen=True)
class GateResult:
    """The gate's result for one kernel at one config (plus its boundary configs)."""

    kernel: str
    config: str
    passed: bool
    pass_rate: float              # seeds whose every check passed / seeds
    n_seeds: int
    n_seeds_passed: int
    min_pass_rate: float
    seeds: tuple[int, ...]
    families: tuple[str, ...]
    boundary_configs: tuple[str, ...]
    skipped_configs: tuple[tuple[str, str], ...]  # (config key, why the kernel does not support it)
    atol: float
    rtol: float
    reports: tuple[CheckReport, ...]
    reason: str | None            # the first failure's, even when min_pass_rate let it pass
    tag: str | None
    reference_seconds: float      # wall time spent in the float64 reference
    seconds: float                # wall time of the whole gate

    @property
    def failures(self) -> tuple[CheckReport, ...]:
        return tuple(r for r in self.reports if not r.passed)

    def reused(self) -> dict[str, str]:
        """Boundary configs whose cases were judged at another config of the sweep: {boundary
        config key: the config whose gate ran them}."""
        return {r.config: r.reused_from for r in self.reports if r.reused_from is not None}

    def tag_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.failures:
            counts[r.tag] = counts.get(r.tag, 0) + 1
        return counts

    def to_row(self) -> dict:
        """Strict-JSON summary (``harness.jsonsafe``); failing checks carry their full error figures."""
        fails = self.failures
        worst = max((r for r in self.reports if r.figures is not None),
                    key=lambda r: r.figures.tolerance_ratio, default=None)
        return jsonable({
            "kernel": self.kernel, "config": self.config, "passed": self.passed,
            "pass_rate": self.pass_rate, "n_seeds": self.n_seeds, "n_seeds_passed": self.n_seeds_passed,
            "min_pass_rate": self.min_pass_rate, "seeds": list(self.seeds), "families": list(self.families),
            "boundary_configs": list(self.boundary_configs),
            "skipped_configs": [list(s) for s in self.skipped_configs],
            "atol": self.atol, "rtol": self.rtol, "tag": self.tag, "reason": self.reason,
            "tags": self.tag_counts(), "n_checks": len(self.reports), "n_failed": len(fails),
            "reference_seconds": self.reference_seconds, "gate_seconds": self.seconds,
            "reused": self.reused(),
            "worst": worst.as_dict() if worst else None,
            "failures": [r.as_dict() for r in fails[:MAX_ROW_FAILURES]],
            "failures_left_out": max(0, len(fails) - MAX_ROW_FAILURES),
        })
