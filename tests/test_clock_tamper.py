"""Issue 47: a kernel that rewrites the clock. The harness times only with its own references to
the clocks, taken before any kernel was imported; a replaced clock (time.perf_counter_ns, the
timing modules' names, torch.cuda.Event's methods) refuses the rows of the arm whose call was
in flight, naming what replaced it; and every timed window is read against an independent clock
and against the thread's CPU time, which a clock replaced for one reading cannot fool."""

from __future__ import annotations

import textwrap

import pytest

from harness import kernel
from harness.workloads import Config
from tests import zoo
from tests.conftest import TINY, gate_calls, gpu_time_lie_line, init_repo, run_bench, sweep_context

# Sweeps, subprocesses and CPU timings that race with a second test process: run alone.
pytestmark = pytest.mark.serial

# tests/test_time_lies.py's CPU config: its gate makes GATE_CALLS calls (one seed, one family,
# the config and its 3 boundary configs, 2 calls each).
CFG = Config("attention", 1, 2, 2, 32, 16, "float32", False)
GATE_CALLS = 8

_fn = {"fn": None}


@kernel("test_clock_liar", workloads=("attention",), dtypes=("float32", "float16"), devices=("cpu", "cuda"))
def clock_liar(q, k, v, out, *, causal, scale):
    _fn["fn"](q, k, v, out, causal=causal, scale=scale)

# The issue 47 kernel as it was committed: time.perf_counter_ns replaced at import, every call
# the right SDPA, three quarters of each call's own duration hidden from the replaced clock.
CLOCK_LIAR = textwrap.dedent('''\
    """Issue 47's kernel: SDPA, timed by a clock that misses three quarters of it."""

    import time

    from bench_kernels.sdpa import _call
    from harness import kernel

    _real = time.perf_counter_ns
    _hidden = [0]


    def _lagging():
        return _real() - _hidden[0]


    time.perf_counter_ns = _lagging


    @kernel("clock_liar", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
    def clock_liar(q, k, v, out, *, causal, scale):
        t0 = _real()
        _call(q, k, v, out, causal, scale, None)
        _hidden[0] += 3 * (_real() - t0) // 4
    ''')
CLOCK_LINE = TINY.replace('candidate = "sdpa"', 'candidate = "clock_liar"').replace(
    "seq_len = [32, 48]", "seq_len = [128]").replace("head_dim = [16]", "head_dim = [32]")


@pytest.mark.slow
def test_the_issue_47_kernel_is_refused_for_replacing_the_clock_through_the_cli(tmp_path):
    from harness.ledger.format import read_rows
    from harness.vocab.outcomes import OUTCOME_KINDS
    from tests.test_provenance import _with_code, commit_all

    repo = _with_code(init_repo(tmp_path / "proj", {"clk": CLOCK_LINE}))
    (repo / "kernels" / "clock_liar.py").write_text(CLOCK_LIAR)
    commit_all(repo, "the issue 47 kernel")
    for args in (("register", "clk"), ("sweep", "clk", "--no-ceilings")):
        r = run_bench(repo, *args)
        assert r.returncode == 0, r.stderr + r.stdout
    rows = [r for r in read_rows(repo / "ledger" / "clk.jsonl") if r.kind in OUTCOME_KINDS]
    mine = [r for r in rows if r.candidate == "clock_liar"]
    assert mine and not [r for r in mine if r.kind == "result"], [(r.kind, r.reason) for r in mine]
    for row in mine:
        assert (row.kind, row.tag) == ("incorrect", "clock_tampered"), (row.kind, row.tag, row.reason)
        assert "time.perf_counter_ns replaced by bench_kernels.clock_liar._lagging" in row.reason, row.reason
        assert "kernels/clock_liar.py" in row.reason, row.reason


# ----------------------------------------------------------------------------- timed calls, in process

def ctx(line: str):
    """tests/test_time_lies.py's line, with room for rounds a loaded host drops (descheduled)."""
    return sweep_context(line=line, candidates=("test_clock_liar",),
                         timing={"warmup_ms": 1, "min_samples": 5, "max_samples": 40, "min_time_ms": 1,
                                 "timeout_s": 30})


def _timed_row(make):
    """The row of the one-config line whose candidate is honest for the gate's calls, then
    ``make()``'s attack on every timed call; whatever it replaced is put back."""
    from harness.pipeline.run import run_config

    _fn["fn"] = zoo.make_honest_then(GATE_CALLS, make())
    try:
        (row,) = run_config(CFG, ("test_clock_liar",), ctx("clocks"))
    finally:
        zoo.unplant()
    return row


def _assert_originals():
    import time

    from harness.measurement.timing import timers

    assert time.perf_counter_ns is zoo._real_ns() and timers.perf_counter_ns is zoo._real_ns()


def test_a_kernel_that_replaces_time_perf_counter_ns_when_timed_is_refused_naming_the_replacement():
    row = _timed_row(zoo.make_clock_replaced)
    assert (row.kind, row.payload.get("tag")) == ("incorrect", "timed_clock_tampered"), row.payload.get("reason")
    reason = row.payload["reason"]
    assert "a timed call replaced the clocks" in reason and "time.perf_counter_ns replaced by tests.zoo." in reason
    assert "tests/zoo.py" in reason, reason


def test_a_kernel_that_rebinds_the_harness_timer_module_global_is_refused():
    row = _timed_row(zoo.make_timer_global_patched)
    assert (row.kind, row.payload.get("tag")) == ("incorrect", "timed_clock_tampered"), row.payload.get("reason")
    assert "harness.measurement.timing.timers." in row.payload["reason"], row.payload["reason"]


def test_a_clock_replaced_for_one_reading_and_put_back_is_caught_by_the_independent_clock():
    # The identity checks run between calls, when the one-shot stand-in has already put every
    # original back: only the independent clock (and the thread's CPU time) see the window
    # read three quarters short.
    row = _timed_row(zoo.make_clock_skewed_once)
    assert (row.kind, row.payload.get("tag")) == ("incorrect", "timed_clock_tampered"), row.payload.get("reason")
    reason = row.payload["reason"]
    assert "disagree with an independent clock" in reason and "shorter than the independent clock" in reason, reason
    assert "replaced the clocks" not in reason, reason
    check = row.payload["timing"]["clock_check"]
    assert check["candidate:test_clock_liar"]["median_gap_us"] > check["baseline"]["median_gap_us"] + 10, check


def test_honest_arms_read_alike_on_both_clocks():
    from harness.pipeline.run import run_config

    (row,) = run_config(CFG, ("sdpa",), ctx("clocks-honest"))
    assert row.kind == "result", row.payload.get("reason")
    t = row.payload["timing"]
    assert t["clock_faults"] == {} and set(t["clock_check"]) == set(t["arms"]), t["clock_check"]
    _assert_originals()


def test_a_clock_replaced_with_no_call_in_flight_refuses_every_candidate_here_and_after():
    """Replaced at import (or by a thread): no arm to blame, so no candidate of this process is
    timed again; the original is put back at once."""
    import time

    from harness.measurement import clockguard
    from harness.pipeline.run import run_config

    fake = zoo._skew_by_own_time()[1]
    zoo._plant(time, "perf_counter_ns", fake)
    (row,) = run_config(CFG, ("sdpa",), ctx("clocks-import"))
    assert (row.kind, row.payload.get("tag")) == ("incorrect", "clock_tampered"), row.payload.get("reason")
    assert "no kernel's call in flight" in row.payload["reason"] and "time.perf_counter_ns" in row.payload["reason"]
    assert time.perf_counter_ns is zoo._real_ns()  # put back
    (again,) = run_config(CFG, ("sdpa",), ctx("clocks-import"))
    assert again.payload.get("tag") == "clock_tampered", again.payload.get("reason")
    clockguard.forget()
    (clean,) = run_config(CFG, ("sdpa",), ctx("clocks-import"))
    assert clean.kind == "result", clean.payload.get("reason")


# ----------------------------------------------------------------------------- the checks, unit by unit

def test_identity_check_names_the_replacement_and_puts_the_original_back():
    import time

    from harness.measurement import clockguard
    from harness.measurement.timing import timers

    assert clockguard.check() == ()
    fake = zoo._skew_by_own_time()[1]
    zoo._plant(time, "thread_time_ns", fake)
    timers.HostTimer.now_s = fake  # a class attribute of the harness's own timer
    timers.float = fake  # a new global that shadows a builtin the timer calls
    try:
        found = {t.name: t.now for t in clockguard.check()}
        assert set(found) == {"time.thread_time_ns", "harness.measurement.timing.timers.HostTimer.now_s",
                              "harness.measurement.timing.timers.float"}, found
        assert found["time.thread_time_ns"].startswith("replaced by tests.zoo._skew_by_own_time.<locals>.now (")
        assert found["harness.measurement.timing.timers.float"].startswith("added (tests.zoo.")
        clockguard.restore()
        assert clockguard.check() == () and not hasattr(timers, "float")
        assert time.thread_time_ns is not fake and timers.HostTimer.now_s is not fake
    finally:
        zoo.unplant()
        clockguard.restore()


def test_a_timer_given_through_the_api_is_not_tampering_a_replaced_one_is():
    """The test seam (an injected virtual timer) drives measure() as before: nothing replaced,
    no window judged against the independent clock (its time is the test's). The harness's own
    timer class replaced behind its back, by an arm's call, is that arm's."""
    from harness.measurement.leftover import TimedWatch
    from harness.measurement.numerics import capture
    from harness.measurement.timing import CallHooks, TimingPolicy, measure, timers
    from tests.timers import ScriptedTimer

    pol = TimingPolicy(warmup_ms=1.0, min_samples=5, max_samples=10, min_time_ms=0.0, noise_target=0.5, timeout_s=60)
    watch = TimedWatch(capture())
    m = measure({"a": lambda s: None, "b": lambda s: None}, n_slots=1, device="cpu", policy=pol,
                timer=ScriptedTimer({"a": 1.0, "b": 2.0}), hooks=CallHooks(watch=watch.before))
    watch.settle()
    assert watch.tampered == {} and m.clock_faults == {} and m.arms["a"].stats.median == 1.0

    real = timers.HostTimer.time_call

    def faster(self, fn, **kw):
        return real(self, fn, **kw) / 4

    def swaps(s):
        timers.HostTimer.time_call = faster

    watch = TimedWatch(capture())
    try:
        measure({"a": lambda s: None, "liar": swaps}, n_slots=1, device="cpu", policy=pol,
                timer=ScriptedTimer({"a": 1.0, "liar": 1.0}), hooks=CallHooks(watch=watch.before))
        watch.settle()
    finally:
        from harness.measurement import clockguard

        clockguard.restore()
    assert set(watch.tampered) == {"liar"}, watch.tampered
    assert "timers.HostTimer.time_call replaced by " in watch.tampered["liar"]
    assert "<locals>.faster (" in watch.tampered["liar"] and "tests/test_clock_tamper.py" in watch.tampered["liar"]
    tag, why = watch.failure("liar", {}, "a")
    assert tag == "clock_tampered" and "faster" in why
    assert watch.failure("a", {}, "liar") is None


def test_a_timing_module_name_replaced_between_the_per_call_checks_refuses_every_arm():
    """Names off the per-call list (here stats.rel_noise, the stop rule's) are compared whole
    once per round: no single call can be blamed, so every arm is refused."""
    from harness.measurement import clockguard, stats
    from harness.measurement.leftover import TimedWatch
    from harness.measurement.numerics import capture
    from harness.measurement.timing import CallHooks, TimingPolicy, measure
    from tests.timers import ScriptedTimer

    pol = TimingPolicy(warmup_ms=1.0, min_samples=5, max_samples=10, min_time_ms=0.0, noise_target=0.5, timeout_s=60)
    real = stats.rel_noise

    def quiet(s):
        stats.rel_noise = lambda xs: 0.0

    watch = TimedWatch(capture())
    try:
        measure({"a": lambda s: None, "liar": quiet}, n_slots=1, device="cpu", policy=pol,
                timer=ScriptedTimer({"a": 1.0, "liar": 1.0}), hooks=CallHooks(watch=watch.before))
        watch.settle()
    finally:
        clockguard.restore()
    assert stats.rel_noise is real
    assert set(watch.tampered) == {None}, watch.tampered
    for arm in ("a", "liar"):
        tag, why = watch.failure(arm, {}, "a")
        assert tag == "clock_tampered" and "harness.measurement.stats.rel_noise replaced by" in why, why
        assert "no single arm's call" in why


def test_a_row_whose_thread_cpu_time_exceeds_its_wall_time_is_refused():
    """Through the seam: an arm whose calling thread reports more CPU time than its window's
    wall time (issue 47's row: 0.0454 ms of CPU in 0.0139 ms) is refused; one that is honest,
    or whose CPU time is within the reads' slack, is not."""
    from harness.measurement.leftover import TimedWatch
    from harness.measurement.numerics import capture
    from harness.measurement.timing import TimingPolicy, measure
    from harness.measurement.timing.timers import CPU_OVER_WALL_SLACK_MS
    from tests.timers import ScriptedTimer

    pol = TimingPolicy(warmup_ms=1.0, min_samples=5, max_samples=10, min_time_ms=0.0, noise_target=0.5, timeout_s=60)
    timer = ScriptedTimer({"liar": 0.0139, "near": 0.05, "base": 0.05},
                          cpu={"liar": 0.0454, "near": 0.05 + CPU_OVER_WALL_SLACK_MS / 2, "base": 0.049})
    m = measure({n: (lambda s: None) for n in ("liar", "near", "base")}, n_slots=1, device="cpu", policy=pol,
                timer=timer)
    assert set(m.clock_faults) == {"liar"}, m.clock_faults
    assert "0.0454 ms on a CPU" in m.clock_faults["liar"] and "0.0139 ms of wall time" in m.clock_faults["liar"]
    assert m.clock_check["liar"]["cpu_over_wall_us"] == pytest.approx(31.5)
    assert m.to_row()["clock_faults"] == m.clock_faults
    tag, why = TimedWatch(capture()).failure("liar", {}, "base", clocks=m.clock_faults)
    assert tag == "clock_tampered" and "disagree with an independent clock" in why


def test_a_long_honest_call_whose_cpu_clock_runs_fast_is_not_tampering_one_past_the_rate_is():
    """The thread CPU clock runs faster than perf_counter on some hosts (0.2-0.65% on the 2-core
    VM): a 1.85 ms honest call 12 µs over its wall time (a sweep's torch_stack baseline under
    load, refused with the fixed slack alone) is no tampering; past the slack plus
    CPU_OVER_WALL_RATE of the wall time it is."""
    from harness.measurement.timing import TimingPolicy, measure
    from harness.measurement.timing.timers import CPU_OVER_WALL_RATE, CPU_OVER_WALL_SLACK_MS
    from tests.timers import ScriptedTimer

    wall = 1.848
    over = CPU_OVER_WALL_SLACK_MS + CPU_OVER_WALL_RATE * wall
    pol = TimingPolicy(warmup_ms=1.0, min_samples=5, max_samples=10, min_time_ms=0.0, noise_target=0.5, timeout_s=60)
    timer = ScriptedTimer({"fast_cpu_clock": wall, "beyond": wall, "base": wall},
                          cpu={"fast_cpu_clock": 1.860, "beyond": wall + over * 1.05, "base": wall - 0.001})
    m = measure({n: (lambda s: None) for n in ("fast_cpu_clock", "beyond", "base")}, n_slots=1, device="cpu",
                policy=pol, timer=timer)
    assert set(m.clock_faults) == {"beyond"}, m.clock_faults
    assert f"at most {over * 1e3:.3g} µs over" in m.clock_faults["beyond"], m.clock_faults["beyond"]


def test_windows_against_the_independent_clock():
    from harness.measurement.timing.timers import (CLOCK_RESOLUTION_MS, HOST_WINDOW_SLACK_MS, CallClock,
                                                   clock_disagreement)

    def judge(calls, kept=None):
        return clock_disagreement(calls, HOST_WINDOW_SLACK_MS, CLOCK_RESOLUTION_MS, kept)

    honest = [CallClock(0.050, 0.050, 0.0503)] * 20
    assert judge(honest) is None
    # Longer than the clock around it, once: no honest window can read that.
    over = honest[:19] + [CallClock(0.060, 0.060, 0.050)]
    assert "window 19 read 0.06 ms" in judge(over)
    # A call sample longer than its own span (CUDA events: start/end outside first/end).
    assert "window 0" in judge([CallClock(0.05, 0.04, 0.06)] + honest)
    # Three quarters hidden on every call: short at the median.
    short = [CallClock(0.0125, 0.0125, 0.0503)] * 20
    assert "37.8 µs shorter" in judge(short)
    # A few preempted reads do not move the median; the kept rounds are what is judged.
    assert judge(honest[:15] + [CallClock(0.05, 0.05, 0.5)] * 5) is None
    assert judge(short, kept=honest) is None and judge(honest, kept=short) is not None


def test_the_sustained_calls_are_read_against_the_independent_clock_too():
    import torch

    from harness.measurement.timing import sustain

    q, k, v = (torch.randn(1, 2, 128, 32) for _ in range(3))
    out = torch.empty_like(q)
    honest = sustain("a", lambda s: zoo.attention(q, k, v, causal=False, scale=0.125), n_slots=1, device="cpu")
    assert honest.clock_fault is None and honest.clock_check["windows"] == len(honest.samples)
    liar = zoo.make_clock_skewed_once()
    try:
        sus = sustain("a", lambda s: liar(q, k, v, out, causal=False, scale=0.125), n_slots=1, device="cpu")
    finally:
        zoo.unplant()
    assert sus.clock_fault is not None and "shorter than the independent clock" in sus.clock_fault
    assert sus.as_dict()["clock_fault"] == sus.clock_fault


# ----------------------------------------------------------------------------- torch's clocks

def _python(code: str):
    import subprocess
    import sys

    from tests.conftest import bench_env

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=bench_env(), timeout=300)


def test_torch_event_clocks_are_taken_at_torch_import_and_their_replacement_is_named():
    r = _python('''
        import harness
        from harness.measurement import clockguard
        import torch  # what a kernel module does first: the harness takes torch's clocks now

        real = torch.cuda.Event.elapsed_time
        torch.cuda.Event.elapsed_time = lambda self, end: 0.25 * real(self, end)
        torch.cuda.synchronize = lambda device=None: None
        assert clockguard.torch_clocks().elapsed_time is real
        print(clockguard.describe(clockguard.check()))
        clockguard.restore()
        assert clockguard.check() == () and torch.cuda.Event.elapsed_time is real
    ''')
    assert r.returncode == 0, r.stderr
    assert "torch.cuda.Event.elapsed_time replaced by __main__.<lambda>" in r.stdout, r.stdout
    assert "torch.cuda.synchronize replaced by __main__.<lambda>" in r.stdout, r.stdout


def test_torch_imported_past_the_harness_hook_is_never_vouched_for():
    r = _python('''
        import sys

        import harness
        from harness.measurement import clockguard

        sys.meta_path[:] = [f for f in sys.meta_path if f is not clockguard.TorchImportHook]
        import torch

        print(clockguard.describe(clockguard.check()))
        clockguard.restore()
        print(clockguard.describe(clockguard.check()))
    ''')
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.strip().splitlines()
    assert "torch was imported past the harness's import hook" in first and second == first


# ----------------------------------------------------------------------------- on a GPU

EVENT_KERNELS = {
    # Each replaces on its first call (the gate's): both modules are imported in every process,
    # so a replacement at import would be on record for both.
    "event_scaled": ('''\
        """Reads a quarter of the CUDA-event windows around its own calls, from its first call on."""

        import torch

        from bench_kernels.sdpa import _call
        from harness import kernel

        _real = torch.cuda.Event.elapsed_time
        _mine = [False]


        def _scaled(self, end):
            ms = _real(self, end)
            if _mine[0]:
                _mine[0] = False
                return 0.25 * ms
            return ms


        @kernel("event_scaled", workloads=("attention",), dtypes=("float16",), devices=("cuda",))
        def event_scaled(q, k, v, out, *, causal, scale):
            torch.cuda.Event.elapsed_time = _scaled
            _call(q, k, v, out, causal, scale, None)
            _mine[0] = True
        ''', ("torch.cuda.Event.elapsed_time replaced by bench_kernels.event_scaled._scaled",)),
    "event_record_replaced": ('''\
        """Records the end event after its own calls on an idle side stream, and synchronizes
        the whole device for torch.cuda.Event.synchronize."""

        import torch

        from bench_kernels.sdpa import _call
        from harness import kernel

        _record = torch.cuda.Event.record
        _mine = [False]
        _side = []


        def _early(self, stream=None):
            if _mine[0]:
                _mine[0] = False
                if not _side:
                    _side.append(torch.cuda.Stream())
                return _record(self, _side[0])
            return _record(self, stream)


        def _device_synchronize(self):
            torch.cuda.synchronize()


        @kernel("event_record_replaced", workloads=("attention",), dtypes=("float16",), devices=("cuda",))
        def event_record_replaced(q, k, v, out, *, causal, scale):
            torch.cuda.Event.record = _early
            torch.cuda.Event.synchronize = _device_synchronize
            _call(q, k, v, out, causal, scale, None)
            _mine[0] = True
        ''', ("torch.cuda.Event.record replaced by bench_kernels.event_record_replaced._early",
              "torch.cuda.Event.synchronize replaced by bench_kernels.event_record_replaced._device_synchronize")),
}


def _gpu_registration() -> str:
    """The GPU time-lie line (conftest.gpu_time_lie_line) as a registration of the event
    kernels against SDPA."""
    cfg, c = gpu_time_lie_line()
    p = c.reg.timing
    return textwrap.dedent(f'''\
        schema = 1
        hypothesis = "kernels that rewrite the CUDA event clocks get no number"
        workload = "attention"
        candidates = {list(EVENT_KERNELS)!r}
        baseline = "sdpa"

        [grid]
        batch = [{cfg.batch}]
        heads = [{cfg.heads}]
        kv_heads = [{cfg.kv_heads}]
        seq_len = [{cfg.seq_len}]
        head_dim = [{cfg.head_dim}]
        dtype = ["{cfg.dtype}"]
        causal = [{str(cfg.causal).lower()}]

        [correctness]
        atol = {{ {cfg.dtype} = {c.reg.atol[cfg.dtype]} }}
        rtol = {{ {cfg.dtype} = {c.reg.rtol[cfg.dtype]} }}
        seeds = [0]
        families = ["normal"]
        # The line's tolerance, as the in-process GPU tests run it: this test is about clocks,
        # and at this tolerance register's canary check lets these two through.
        accept_weak = ["drop_last_key", "scale_1pct"]

        [timing]
        warmup_ms = {p.warmup_ms}
        min_samples = {p.min_samples}
        max_samples = {p.max_samples}
        min_time_ms = {p.min_time_ms}
        timeout_s = {p.timeout_s}

        [bar]
        go = "pass_rate == 1.0"
        prediction = 0.0
        ''').replace("'", '"')


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_kernels_that_replace_the_cuda_event_clocks_are_refused_through_the_cli(tmp_path):
    from harness.ledger.format import read_rows
    from harness.vocab.outcomes import OUTCOME_KINDS
    from tests.test_provenance import _with_code, commit_all

    repo = _with_code(init_repo(tmp_path / "proj", {"events": _gpu_registration()}))
    for name, (text, _) in EVENT_KERNELS.items():
        (repo / "kernels" / f"{name}.py").write_text(textwrap.dedent(text))
    commit_all(repo, "the event kernels")
    for args in (("register", "events"), ("sweep", "events", "--no-ceilings")):
        r = run_bench(repo, *args, timeout=300)
        assert r.returncode == 0, r.stderr + r.stdout
    got = {r.candidate: r for r in read_rows(repo / "ledger" / "events.jsonl") if r.kind in OUTCOME_KINDS}
    for name, (_, named) in EVENT_KERNELS.items():
        row = got[name]
        assert (row.kind, row.tag) == ("incorrect", "clock_tampered"), (name, row.kind, row.tag, row.reason)
        for what in named:
            assert what in row.reason, (name, row.reason)
        assert f"kernels/{name}.py" in row.reason, row.reason
    assert "bench_kernels.event_scaled" not in got["event_record_replaced"].reason  # each for its own


@pytest.mark.gpu
@pytest.mark.parametrize("make,named", [
    (zoo.make_event_time_scaled, ("torch.cuda.Event.elapsed_time",)),
    (zoo.make_event_record_replaced, ("torch.cuda.Event.record", "torch.cuda.Event.synchronize"))])
def test_gpu_a_kernel_that_replaces_the_event_clocks_when_timed_is_refused(make, named):
    from harness.pipeline.run import run_config

    cfg, c = gpu_time_lie_line("test_clock_liar")
    _fn["fn"] = zoo.make_honest_then(gate_calls(cfg, c), make())
    try:
        (row,) = run_config(cfg, ("test_clock_liar",), c)
    finally:
        zoo.unplant()
    assert (row.kind, row.payload.get("tag")) == ("incorrect", "timed_clock_tampered"), row.payload.get("reason")
    for what in named:
        assert f"{what} replaced by tests.zoo." in row.payload["reason"], row.payload["reason"]
    # The honest arms' windows agreed with the independent clock.
    check = row.payload["timing"]["clock_check"]
    assert row.payload["timing"]["clock_faults"] == {} or set(row.payload["timing"]["clock_faults"]) <= {
        "candidate:test_clock_liar"}, row.payload["timing"]["clock_faults"]
    assert check["baseline"]["windows"] > 0 and check["baseline"]["max_over_us"] < 0, check


@pytest.mark.gpu
def test_gpu_event_windows_read_short_behind_the_identity_check_are_caught_by_the_independent_clock():
    """A reference swapped where no identity check looks (the timer's own copy of torch's
    functions, here replaced by hand) still cannot read a window short: the independent clock
    around it disagrees. An honest timer's windows agree."""
    import dataclasses

    import torch

    from harness.measurement.timing.timers import CudaEventTimer, clock_disagreement

    # Four 8192³ fp16 products, ~5.6 ms on an H100: a quarter read of that window is ~4 ms
    # short, well past the wake-up the slack allows (GPU_WINDOW_SLACK_MS).
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)

    def call():
        for _ in range(4):
            a @ a

    def judged(timer, n=30):
        for _ in range(n):
            timer.time_call(call, arm="mm")
        return clock_disagreement(timer.clock_calls["mm"], timer.clock_slack_ms, timer.clock_resolution_ms)

    honest = CudaEventTimer("cuda")
    assert judged(honest) is None
    lying = CudaEventTimer("cuda")
    real = lying._tc.elapsed_time
    lying._tc = dataclasses.replace(lying._tc, elapsed_time=lambda s, e: 0.25 * real(s, e))
    why = judged(lying)
    assert why is not None and "shorter than the independent clock" in why, why
