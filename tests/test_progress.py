"""The sweep's progress (issue 51 item 7): the phase, the running tally, the heartbeat, and an
ETA from the planned configs' sizes — fitted on the configs this sweep finished, before the
first one ends on the line's earlier configs on this device, else "estimating"."""

from __future__ import annotations

import time

import pytest

from harness.ledger.format import read_rows
from harness.pipeline.context import Task
from harness.reporting.analysis import eta
from harness.reporting.render.progress import ESTIMATING, SweepProgress
from harness.vocab.outcomes import RESULT
from harness.workloads import Config
from tests.conftest import REPO


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _task(seq_len: int, candidates=("sdpa",)) -> Task:
    return Task(Config("attention", 1, 2, 2, seq_len, 16, "float32", False), tuple(candidates))


@pytest.fixture(scope="module")
def peers():
    rows = list(read_rows(REPO / "ledger" / "flash-h200-peers.jsonl"))
    return rows, next(r for r in rows if r.kind == RESULT).env


def test_the_fit_is_proportional_on_one_size_affine_on_several_and_none_on_nothing():
    assert eta.fit([]) is None
    one = eta.fit([(100.0, 5.0)])
    assert (one.fixed, one.per_size) == (0.0, 0.05) and one.seconds(300.0) == pytest.approx(15.0)
    two = eta.fit([(100.0, 7.0), (300.0, 11.0)])  # 5 s fixed + 0.02 s per unit
    assert two.fixed == pytest.approx(5.0) and two.per_size == pytest.approx(0.02)
    flat = eta.fit([(100.0, 9.0), (300.0, 7.0)])  # time falling with size: the fixed cost alone
    assert flat.per_size == 0.0 and flat.fixed == pytest.approx(8.0)
    assert eta.remaining(None, [1.0]) is None
    # A running config counts what is left of its fitted time, never below zero.
    assert eta.remaining(two, [100.0], [(300.0, 4.0), (100.0, 50.0)]) == pytest.approx(7.0 + 7.0 + 0.0)


def test_the_prior_reads_this_lines_configs_on_this_device_only(peers):
    rows, env = peers
    points = eta.prior(rows, env)
    configs = {(r.config_key, r.commit, r.cost["total"]) for r in rows if r.kind == RESULT}
    assert len(points) == len(configs) == 16
    # Each config timed the baseline and its three candidates: FLOPs x 4.
    first = next(r for r in rows if r.kind == RESULT)
    assert (eta.config_size(Config(**first.config), 4), first.cost["total"]) in points
    assert eta.prior(rows, {"device": "cpu"}) == [] and eta.prior(rows, None) == []


def test_the_eta_says_estimating_until_a_config_ends_then_scales_by_size(capsys):
    clock = Clock()
    p = SweepProgress("x", live=False, clock=clock, heartbeat_s=3600)
    tasks = [_task(32), _task(64), _task(128)]
    p.start(3, tasks)
    try:
        assert p.eta_text() == ESTIMATING  # nothing known: no number made up
        key = tasks[0].config.key()
        p.advance_to(key)
        clock.now += 4
        p.phase(key, "timing")
        assert p.running_text() == "n32 timing 0:00:04"  # named by what sets it apart from the others
        assert p.eta_text() == ESTIMATING
        clock.now += 6
        p.writing(key)
        assert p.running_text() == "n32 writing 0:00:10"
        p.done(key, [])
        sizes = [eta.task_size(t) for t in tasks]
        assert sizes[1] == 4 * sizes[0] and sizes[2] == 16 * sizes[0]  # FLOPs grow with seq_len²
        # One config known: time ∝ size, 10 s for the first, so 40 s + 160 s left.
        assert p.eta_seconds() == pytest.approx(200.0)
        p.advance_to(tasks[1].config.key())
        clock.now += 30
        assert p.eta_seconds() == pytest.approx(10.0 + 160.0)
    finally:
        p.stop()
    out = capsys.readouterr().out
    assert "sweep of line x: 3 configs to run" in out and f"[1/3] {key} (10.0 s)" in out


def test_the_eta_starts_from_the_lines_earlier_configs_on_this_device(peers):
    rows, env = peers
    clock = Clock()
    p = SweepProgress("x", live=False, clock=clock, heartbeat_s=3600)
    tasks = [Task(Config(**r.config), ("triton_flash", "sdpa_cudnn", "fa4")) for r in rows
             if r.kind == RESULT and r.candidate == "fa4"]
    p.start(len(tasks), tasks, rows, env)
    try:
        first = eta.fit(eta.prior(rows, env))
        assert p.eta_seconds() == pytest.approx(sum(first.seconds(eta.task_size(t)) for t in tasks))
        assert p.eta_text() != ESTIMATING
    finally:
        p.stop()


def test_the_tally_counts_each_candidates_outcome(peers, capsys):
    rows, _ = peers
    p = SweepProgress("x", live=False, clock=Clock(), heartbeat_s=3600)
    p.start(2)
    config = next(r for r in rows if r.kind == RESULT).config_key
    mine = [r for r in rows if r.kind == RESULT and r.config_key == config][:3]
    p.advance_to(config)
    p.done(config, mine)
    p.stop()
    assert p.tally == {"results": 3, "rejected": 0, "skipped": 0}
    assert p.tally_text() == "results 3 rejected 0 skipped 0"
    assert "[1/2]" in capsys.readouterr().out


def test_a_long_config_gets_a_heartbeat_line_off_a_terminal(capsys):
    clock = Clock()
    p = SweepProgress("x", live=False, clock=clock, heartbeat_s=60)
    p.start(1, [_task(32)])
    key = _task(32).config.key()
    p.advance_to(key)
    p.phase(key, "gate")
    clock.now += 59
    assert p.heartbeat_line() is None
    clock.now += 1
    line = p.heartbeat_line()
    assert line == f"  ... still running {key}: gate, 0:01:00 on this config (results 0 rejected 0 skipped 0 so far)"
    assert not line.startswith("[") and "ETA" not in line  # a log's [i/n] lines stay the configs written
    p.stop()
    # The thread prints it while the config runs (a short period here, a real clock).
    q = SweepProgress("y", live=False, heartbeat_s=0.05)
    q.start(1, [_task(32)])
    q.advance_to(key)
    time.sleep(0.5)
    q.stop()
    assert "still running" in capsys.readouterr().out


def test_the_terminal_bar_shows_the_phase_the_tally_and_the_eta(capsys):
    clock = Clock()
    p = SweepProgress("x", live=True, clock=clock)
    tasks = [_task(32), _task(64)]
    p.start(2, tasks)
    key = tasks[0].config.key()
    p.advance_to(key)
    p.phase(key, "check")
    clock.now += 3
    assert p.eta_text() == ESTIMATING and p.running_text() == "n32 checks 0:00:03"
    # The bar as a 100-column terminal draws it while the config runs: on one line, whole.
    import io

    from rich.console import Console

    screen = Console(file=io.StringIO(), width=100, force_terminal=False)
    screen.print(p._progress.get_renderable())
    drawn = screen.file.getvalue().splitlines()
    assert len(drawn) == 1 and "ETA estimating n32 checks 0:00:03 results 0 rejected 0 skipped 0" in " ".join(
        drawn[0].split()), drawn
    p.done(key, [])
    p.stop()
    out = capsys.readouterr().out
    assert "1/2" in out and "ETA 0:00:12" in out and "results 0 rejected 0 skipped 0" in out


def test_the_scheduler_hands_each_phase_a_slot_reports_to_the_progress():
    """`ScheduleHooks(on_phase=...)`: the hook the bar's phase comes from, per config key, in order."""
    from types import SimpleNamespace

    from harness.execution.executor import Done, Executor, Phase, ScheduleHooks, SlotInfo, schedule

    class Scripted(Executor):
        can_kill = False

        def __init__(self):
            self.events = []

        def start(self):
            return [SlotInfo({"device": "cpu"}, {})]

        def submit(self, slot, job):
            self.events += [Phase(slot, job.id, ("torch_stack",), "gate"),
                            Phase(slot, job.id, ("torch_stack", "sdpa"), "timing"),
                            Phase(slot, job.id, (), "check"), Done(slot, job.id, [])]

        def poll(self, timeout):
            out, self.events = self.events, []
            return out

        def replace(self, slot, cause=None):
            raise AssertionError("no worker is lost here")

        def close(self):
            pass

    heard, written = [], []
    tasks = [_task(32), _task(64)]
    ctx = SimpleNamespace(reg=SimpleNamespace(timing=SimpleNamespace(watchdog_s=60.0, timeout_s=60.0)))
    assert schedule(Scripted(), [{"device": "cpu"}], tasks, ctx,
                    ScheduleHooks(lambda t, rows: written.append(t), on_phase=lambda key, ph: heard.append((key, ph))))
    keys = [t.config.key() for t in tasks]
    assert heard == [(k, ph) for k in keys for ph in ("gate", "timing", "check")] and written == tasks
