"""The harness's own cost (issue 32): every outcome row holds what its config's phases took,
and a sweep ends with where its time went, per config."""

from __future__ import annotations

import pytest

from harness.ledger.format import read_rows
from harness.vocab.outcomes import OUTCOME_KINDS
from harness.pipeline import phase
from harness.commands.sweep import sweep_cost
from harness.reporting.render.sweep import cost_line
from tests.conftest import git, run_bench, sweep_context


class Ticks:
    """A clock a test moves by hand (the one injectable seam)."""

    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_an_account_charges_each_phase_and_each_kernel_the_time_until_the_next_report():
    clock = Ticks()
    phase.begin(clock)
    try:
        clock.t += 0.5                          # setup (the account starts there)
        phase.report("base", phase.GATE)
        clock.t += 2.0
        phase.note("reference", 1.5)
        phase.report("cand", phase.GATE)
        clock.t += 3.0
        phase.report(("base", "cand"), phase.TIMING)
        clock.t += 4.0
        phase.report(None, phase.CHECK)
        clock.t += 0.25
        phase.report("cand", phase.RATES)
        clock.t += 1.0
    finally:
        cost = phase.end()
    assert cost["seconds"] == {"setup": 0.5, "gate": 5.0, "timing": 4.0, "check": 0.25, "rates": 1.0}
    assert cost["per_kernel"] == {"gate": {"base": 2.0, "cand": 3.0}, "rates": {"cand": 1.0}}
    assert cost["of_which"] == {"reference": 1.5} and cost["total"] == pytest.approx(10.75)
    assert phase.end() is None  # accounting stopped: reports cost nothing after it
    phase.report("x", phase.GATE)


def test_every_row_of_a_config_holds_its_cost():
    from harness.pipeline.run import run_config
    from harness.workloads import Config

    ctx = sweep_context(candidates=("sdpa",))
    cfg = Config("attention", 1, 2, 2, 32, 16, "float32", False)
    rows = run_config(cfg, ("sdpa",), ctx)
    assert rows
    costs = [o.payload["cost"] for o in rows]
    assert all(c == costs[0] for c in costs)  # one config, one cost
    c = costs[0]
    assert set(c["seconds"]) >= {"setup", "gate"} and all(v >= 0 for v in c["seconds"].values())
    assert set(c["per_kernel"]["gate"]) == {"torch_stack", "sdpa"}
    assert 0 < c["of_which"]["reference"] <= c["seconds"]["gate"]
    assert sum(c["seconds"].values()) == pytest.approx(c["total"])


def test_the_sweep_cost_adds_the_configs_and_the_writes_and_reads_in_one_line():
    a = {"seconds": {"gate": 2.0, "timing": 1.0}, "of_which": {"reference": 1.0}, "total": 3.0}
    b = {"seconds": {"gate": 4.0, "timing": 3.0, "check": 1.0}, "of_which": {"reference": 3.0}, "total": 8.0}
    cost = sweep_cost([a, b], write_s=1.0, profile_s=0.0, wall_s=14.0)
    assert cost == {"configs": 2, "phases": {"gate": 6.0, "timing": 4.0, "check": 1.0},
                    "of_which": {"reference": 4.0}, "in_configs": 11.0, "append_commit": 1.0, "profile": 0.0,
                    "wall": 14.0}
    assert cost_line(cost) == ("harness time per config (2 configs run, 14.0 s wall): gates 3.00 s (float64 "
                               "references 2.00 s), timing 2.00 s, after-timing checks 0.50 s, append+commit 0.50 s")
    assert cost_line(sweep_cost([], 0.0, 0.0, 1.0)) is None


def test_a_cli_sweep_writes_the_cost_in_every_row_and_ends_with_it(repo):
    assert run_bench(repo, "register", "tiny").returncode == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "register tiny")
    s = run_bench(repo, "sweep", "tiny", "--no-ceilings")
    assert s.returncode == 0, s.stdout + s.stderr
    outcomes = [r for r in read_rows(repo / "ledger" / "tiny.jsonl") if r.kind in OUTCOME_KINDS]
    assert outcomes and all(r.cost and r.cost["total"] > 0 and "gate" in r.cost["seconds"] for r in outcomes)
    (line,) = [x for x in s.stdout.splitlines() if "harness time per config" in x]
    n = len({r.config_key for r in outcomes})
    assert f"({n} configs run," in line and "gates" in line and "append+commit" in line
