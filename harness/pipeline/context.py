"""What one config runs under and what it hands back: plain, picklable data.

A ``Task`` (a config and its open candidates) and a ``SweepContext`` travel to whichever
process runs the config; ``Outcome`` rows come back. The seeds a config draws its timing,
recheck and spot-check inputs from are here, so every stage derives them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from harness.ledger.rows import OutcomeRow, load
from harness.registry import get_workload
from harness.workloads import Config
# The stages' seed offsets live in workloads/seeds.py; the stages read them from here.

if TYPE_CHECKING:
    from harness.registration.schema import Registration


@dataclass(frozen=True)
class Task:
    """A config and the candidates still open at it: what a sweep hands an executor."""

    config: Config
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class SweepContext:
    """What a config runs under: the line's registration (parsed once, at load) and what the
    registration cannot know — the device, its stored ceilings, the repository root (kernel
    sources inside it are recorded by their path relative to it). Picklable: it travels to
    the worker processes."""

    reg: Registration
    device: str
    ceilings: object = None  # the ceilings row used (ledger.rows.CeilingsRow), None: no ceilings
    root: str | None = None

    @property
    def workload(self):
        """The line's workload (``harness.workloads.api.Workload``): every stage draws, calls,
        references and counts through it."""
        return get_workload(self.reg.workload)

    @property
    def rate_bar(self) -> bool:
        """The bar judges an absolute rate (one of metrics.RATE_METRICS): the rates of each
        (config, candidate) pair a rate clause reads (Registration.judges_rates_of) come from
        the sustained phase after the interleaved rounds (calls back to back, as
        triton.testing.do_bench times them); speedups still come from the rounds, where the
        arms share one clock."""
        return self.reg.judges_rates()


class Failure(NamedTuple):
    """A check's failure in the shape of a CheckReport's: its tag and why."""

    tag: str
    reason: str


@dataclass(frozen=True)
class Outcome:
    """One row to append: its kind and payload (the stamp is added by the writer)."""

    kind: str
    payload: dict

    @property
    def row(self) -> OutcomeRow:
        """The payload as the typed row it is appended as (fields it does not hold read None)."""
        row = load({"kind": self.kind, **self.payload})
        if not isinstance(row, OutcomeRow):
            raise ValueError(f"an outcome's kind {self.kind!r} is no outcome row's")
        return row


def spot_seed(cfg: Config, ctx: SweepContext) -> int:
    """The seed of the random timed call checked per arm: from the config and the line's
    seeds, so it is recorded and reproducible but not known to a kernel before it runs."""
    import hashlib

    digest = hashlib.sha256(f"{ctx.reg.line}|{cfg.key()}|{ctx.reg.seeds[0]}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def refresh_seed(cfg: Config, ctx: SweepContext) -> int:
    """The seed of the content refresh (which measured rounds get new inputs, how, and the
    inputs' seeds): as ``spot_seed``, recorded and reproducible, not known to a kernel."""
    import hashlib

    digest = hashlib.sha256(f"refresh|{ctx.reg.line}|{cfg.key()}|{ctx.reg.seeds[0]}".encode()).digest()
    return int.from_bytes(digest[:8], "little")
