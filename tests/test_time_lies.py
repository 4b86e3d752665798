"""Issue 25: kernels whose output is right but whose time is not get no number — work left
running after the call (device streams, host threads), global state changed for the next arm.
The gate's half is in test_correctness (the zoo's hollow kernels); these are the timed calls'."""

from __future__ import annotations

import pytest

from harness import kernel
from harness.errors import UserError
from harness.measurement import leftover
from harness.measurement.leftover import TimedWatch, host_leftovers, host_snapshot, timed_leftover
from harness.measurement.numerics import NumericPins, capture
from harness.measurement.timing import ARM_BASELINE, ARM_CONTROL
from harness.measurement.timing.orders import MAX_PERMUTED_ARMS, round_orders
from harness.pipeline.run import run_config
from harness.workloads import Config
from tests import zoo
from tests.conftest import gate_calls as _gate_calls
from tests.conftest import gpu_time_lie_line as _gpu_line
from tests.conftest import sweep_context

# Signals, device locks and CPU timings that race with a second test process: run alone
# (the README's second pass, `-m serial`), never beside another xdist worker.
pytestmark = pytest.mark.serial

CFG = Config("attention", 1, 2, 2, 32, 16, "float32", False)
# CFG's gate with one seed and one family: 2 calls at CFG and each of its 3 boundary configs.
GATE_CALLS = 8


def ctx(line: str):
    return sweep_context(line=line, timing={"warmup_ms": 1, "min_samples": 5, "max_samples": 20, "min_time_ms": 1,
                                            "timeout_s": 5})


_fn = {"fn": None}


@kernel("test_time_liar", workloads=("attention",), dtypes=("float32", "float16"), devices=("cpu", "cuda"))
def time_liar(q, k, v, out, *, causal, scale):
    _fn["fn"](q, k, v, out, causal=causal, scale=scale)


# ----------------------------------------------------------------------------- global state


def test_thread_counts_and_affinity_are_part_of_the_checked_state():
    import torch

    s = capture().as_dict()
    assert s["num_threads"] == torch.get_num_threads()
    assert s["num_interop_threads"] == torch.get_num_interop_threads()
    import os

    if hasattr(os, "sched_getaffinity"):
        assert s["cpu_affinity"] == tuple(sorted(os.sched_getaffinity(0)))


def test_a_registration_may_pin_num_threads_but_not_the_capture_only_state():
    assert NumericPins.from_registration({"num_threads": 2}).as_dict() == {"num_threads": 2}
    for bad in ({"num_threads": 0}, {"num_threads": True}, {"cpu_affinity": [0]}, {"num_interop_threads": 1}):
        with pytest.raises(UserError, match=r"\[numerics\]"):
            NumericPins.from_registration(bad)


def test_a_kernel_that_changes_the_thread_count_only_when_timed_gets_no_number():
    import torch

    before = torch.get_num_threads()
    _fn["fn"] = zoo.make_honest_then(GATE_CALLS, zoo.threads_changed)
    (row,) = run_config(CFG, ("test_time_liar",), ctx("threads"))
    assert row.kind == "incorrect", row.payload.get("reason")
    assert row.payload["tag"] == "timed_numerics_changed"
    assert "num_threads" in row.payload["reason"]
    # Set back before the next arm ran, and after the config.
    assert torch.get_num_threads() == before


def test_a_kernel_that_flips_torch_flags_only_when_timed_gets_no_number():
    """The numeric flags read through owners looked up once per process (issue 32) still
    catch a kernel that flips them, through torch's own accessors, and set them back."""
    import torch

    tf32, flash = torch.backends.cuda.matmul.allow_tf32, torch.backends.cuda.flash_sdp_enabled()
    _fn["fn"] = zoo.make_honest_then(GATE_CALLS, zoo.flags_flipped)
    (row,) = run_config(CFG, ("test_time_liar",), ctx("flags"))
    assert row.kind == "incorrect", row.payload.get("reason")
    assert row.payload["tag"] == "timed_numerics_changed"
    assert "allow_tf32" in row.payload["reason"] and "flash_sdp" in row.payload["reason"], row.payload["reason"]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cuda.flash_sdp_enabled()) == (tf32, flash)


def test_a_state_change_is_blamed_on_the_previous_call_and_set_back_before_the_next():
    import torch

    watch = TimedWatch(capture())
    before = torch.get_num_threads()
    watch.before("a")
    torch.set_num_threads(1 if before != 1 else 2)  # "a"'s call moves it
    watch.before("b")  # before "b" runs: blamed on "a", pinned back
    assert torch.get_num_threads() == before
    assert set(watch.moved) == {"a"}
    assert watch.failure("a", {}, "b")[0] == "numerics_changed"
    assert watch.failure("b", {}, "a") is None


# ----------------------------------------------------------------------------- host work left running


def test_host_leftovers_names_a_busy_thread_and_ignores_an_idle_one():
    import threading

    snap = host_snapshot()
    assert host_leftovers(snap) is None
    idle = threading.Event()
    t = threading.Thread(target=idle.wait, name="idle-pool", daemon=True)
    t.start()
    try:
        assert host_leftovers(snap) is None  # alive, but uses no CPU: not work left running
    finally:
        idle.set()
        t.join()
    out = zoo.attention(*(torch_inputs()), causal=False, scale=0.25)
    zoo.leaves_host_thread(*torch_inputs(), out, causal=False, scale=0.25)
    why = host_leftovers(snap)
    assert why is not None and "thread 'leftover'" in why and "ms of CPU" in why


def torch_inputs():
    from harness.workloads.inputs import make_inputs

    return make_inputs(CFG, 0, "normal", "cpu")


def test_a_kernel_that_leaves_a_thread_running_only_when_timed_gets_no_number():
    _fn["fn"] = zoo.make_honest_then(GATE_CALLS, zoo.leaves_host_thread)
    (row,) = run_config(CFG, ("test_time_liar",), ctx("host"))
    assert row.kind == "incorrect", row.payload.get("reason")
    assert row.payload["tag"] == "timed_left_running"
    assert "thread 'leftover'" in row.payload["reason"]


def test_honest_arms_leave_nothing_running():
    (row,) = run_config(CFG, ("sdpa",), ctx("honest"))
    assert row.kind == "result", row.payload.get("reason")


# ----------------------------------------------------------------------------- device work left running


def test_drains_judge_a_share_of_long_drains_and_a_median_above_the_baseline():
    quiet = [11e-6] * 100
    assert timed_leftover({"c": quiet, "b": quiet}, "c", "b") is None
    # Every call leaves a little (median 60 µs against 11 µs): named though no drain is long.
    assert "median drain" in timed_leftover({"c": [60e-6] * 100, "b": quiet}, "c", "b")
    # Some calls leave a lot: the share of long drains.
    some = quiet[:90] + [1.5e-3] * 10
    assert "10 of 100 timed calls" in timed_leftover({"c": some, "b": quiet}, "c", "b")
    # Host jitter: one long drain in a hundred is within DRAIN_MAX_SHARE.
    assert timed_leftover({"c": quiet[:99] + [leftover.DRAIN_LIMIT_S * 3], "b": quiet}, "c", "b") is None


def test_a_share_of_long_drains_is_named_only_when_calls_made_again_confirm_it():
    quiet = [11e-6] * 36
    jitter = quiet[:34] + [leftover.DRAIN_LIMIT_S * 2, leftover.DRAIN_LIMIT_S * 4]  # 2 of 36: over 5%
    asked = []

    def confirm_with(drain):
        def confirm(arm, n):
            asked.append((arm, n))
            return [drain] * n
        return confirm

    # Unconfirmed (the calls made again drain at once): host jitter, not work left running.
    assert timed_leftover({"c": jitter, "b": quiet}, "c", "b", confirm_with(11e-6)) is None
    assert asked == [("c", 36)]  # as many calls as the rounds judged
    # Confirmed: named, with both counts.
    why = timed_leftover({"c": jitter, "b": quiet}, "c", "b", confirm_with(1e-3))
    assert "2 of 36 timed calls" in why and "36 of 36 calls made again to confirm did" in why
    # Work left on a quarter of the timed calls is named even when the calls made again leave
    # none: together still over the share.
    quarter = quiet[:27] + [1e-3] * 9
    assert "9 of 36 timed calls" in timed_leftover({"c": quarter, "b": quiet}, "c", "b", confirm_with(11e-6))
    # A quiet arm is never called again; the median rule needs no confirmation.
    asked.clear()
    assert timed_leftover({"c": quiet, "b": quiet}, "c", "b", confirm_with(1e-3)) is None
    assert "median drain" in timed_leftover({"c": [60e-6] * 36, "b": quiet}, "c", "b", confirm_with(11e-6))
    assert asked == []
    assert leftover.confirm_calls(500) == leftover.DRAIN_CONFIRM_MAX_CALLS
    assert leftover.confirm_calls(3) == leftover.DRAIN_CONFIRM_MIN_CALLS


def test_the_watch_keeps_each_confirmation_for_the_rows_and_blames_a_state_change_on_its_arm():
    import torch

    quiet, jitter = [11e-6] * 36, [11e-6] * 34 + [3e-4, 4e-4]
    watch = TimedWatch(capture())
    assert watch.failure("c", {"c": jitter, "b": quiet}, "b", lambda arm, n: [12e-6] * n) is None
    assert watch.confirmed == {"c": {"calls": 36, "long": 0, "drain_us": [pytest.approx(12.0)] * 36}}
    # A confirming call that moves global state is blamed on the arm called again, and set back.
    before = torch.get_num_threads()

    def moves(arm, n):
        torch.set_num_threads(1 if before != 1 else 2)
        return [12e-6] * n

    tag, why = watch.failure("d", {"d": jitter, "b": quiet}, "b", moves)
    assert tag == "numerics_changed" and "num_threads" in why
    assert torch.get_num_threads() == before


def test_the_control_follows_every_candidate_as_often_as_the_baseline_does():
    # The order rule (docs/architecture.md): whatever a candidate leaves for the call after it
    # lands on the baseline and on the control equally often, so it cannot bias the speedup
    # without showing in the control's spread of orders, and the timer drains the device
    # between calls, so no arm runs beside work another left.
    for n in (1, 2, 3, 5):
        arms = [f"candidate:{i}" for i in range(n)] + [ARM_BASELINE, ARM_CONTROL]
        calls = [a for order in round_orders(arms) for a in order]
        after = {(x, y): 0 for x in arms for y in arms}
        for x, y in zip(calls, calls[1:]):
            after[x, y] += 1
        for c in arms[:n]:
            b, k = after[c, ARM_BASELINE], after[c, ARM_CONTROL]
            if len(arms) <= MAX_PERMUTED_ARMS:
                assert b == k > 0
            else:  # Williams blocks: even inside a block, the block boundaries vary (orders.py)
                assert k > 0 and abs(b - k) <= 0.02 * k, (c, b, k)


@pytest.mark.gpu
def test_gpu_a_kernel_that_leaves_device_work_when_timed_gets_no_number_and_the_baseline_is_unharmed():
    cfg, c = _gpu_line()
    # The gate's calls on the GPU: its seeds, families and boundary configs, and the stream look.
    _fn["fn"] = zoo.make_honest_then(10**9, zoo.leaves_device_work)
    (honest,) = run_config(cfg, ("test_time_liar",), c)
    assert honest.kind == "result", honest.payload.get("reason")
    _fn["fn"] = zoo.make_honest_then(_gate_calls(cfg, c), zoo.leaves_device_work)
    (row,) = run_config(cfg, ("test_time_liar",), c)
    assert row.kind == "incorrect", row.payload.get("reason")
    assert row.payload["tag"] == "timed_left_running", row.payload["reason"]
    t = row.payload["timing"]
    # Drained between calls: the baseline and the control read alike (the incident: 3.2x apart).
    base, ctl = (t["arms"][a]["stats"]["median"] for a in (ARM_BASELINE, ARM_CONTROL))
    assert abs(base / ctl - 1) < 0.05, (base, ctl)


@pytest.mark.gpu
def test_gpu_a_kernel_that_leaves_device_work_on_every_third_timed_call_is_confirmed_and_named():
    # Never two calls in a row (the gate's confirmation) but a third of the timed ones: the
    # share of long drains is confirmed by calls made again, through the real timer and drain.
    cfg, c = _gpu_line()
    n = {"n": 0}

    def every_third(q, k, v, out, *, causal, scale):
        n["n"] += 1
        if n["n"] % 3 == 0:
            zoo.leaves_device_work(q, k, v, out, causal=causal, scale=scale)
        else:
            out.copy_(zoo.attention(q, k, v, causal=causal, scale=scale))

    _fn["fn"] = every_third
    (row,) = run_config(cfg, ("test_time_liar",), c)
    assert row.kind == "incorrect", row.payload.get("reason")
    assert row.payload["tag"] == "timed_left_running", row.payload["reason"]
    assert "calls made again to confirm" in row.payload["reason"], row.payload["reason"]


# ----------------------------------------------------------------------------- through the real CLI

# The attack line's warm-up: long enough on a GPU for NVML readings in its tail (clocks.py).
WARMUP_MS = {"cpu": 5, "cuda": 50}
# On the CPU at seq_len 128 the remembering kernel's attention costs about what its own content
# lookup does (0.057 ms fresh against 0.054 ms seen): nothing to remember, nothing to find, and
# its row read `result` in 2 of 6 runs. At 512 the attention it skips is most of its time.
SEQ_LEN = {"cpu": 512, "cuda": 128}

ATTACKS_LINE = '''\
schema = 1
hypothesis = "kernels whose outputs are right but whose times are not get no number"
workload = "attention"
candidates = {candidates}
baseline = "{baseline}"

[grid]
batch = [1]
heads = [2]
seq_len = [{seq_len}]
head_dim = [32]
dtype = ["{dtype}"]
causal = [false]

[correctness]
atol = {{ {dtype} = {tol} }}
rtol = {{ {dtype} = {tol} }}
seeds = [0]
families = ["normal"]
{weak}

[timing]
warmup_ms = {warmup_ms}
min_samples = 5
max_samples = 80
min_time_ms = 5
timeout_s = 20

[bar]
go = "pass_rate == 1.0"
prediction = 0.0
'''

# The attacks as a plugin (a real installed distribution whose entry point registers them),
# the honest sdpa beside them: (kernel, expected outcome, expected tag); cuda-only ones last.
ATTACKS = (("sdpa", "result", None),
           ("remembers_inputs", "incorrect", "remembers_inputs"),
           ("threads_changed", "incorrect", "numerics_changed"),
           ("leaves_host_thread", "incorrect", "left_running"),
           ("leaves_device_work", "incorrect", "left_running"))
PLUGIN = '''\
from harness import kernel
from tests import zoo

for name, fn, devices in (("remembers_inputs", zoo.make_remembers_inputs(), ("cpu", "cuda")),
                          ("threads_changed", zoo.threads_changed, ("cpu", "cuda")),
                          ("leaves_host_thread", zoo.leaves_host_thread, ("cpu", "cuda")),
                          ("leaves_device_work", zoo.leaves_device_work, ("cuda",))):
    kernel(name, workloads=("attention",), dtypes=("float32", "float16"), devices=devices)(fn)
'''


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_each_attack_is_rejected_for_its_own_reason_through_the_cli(tmp_path, device):
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import bench_env, init_repo, installed_dist

    attacks = ATTACKS if device == "cuda" else ATTACKS[:-1]
    text = ATTACKS_LINE.format(candidates=json.dumps([a for a, _, _ in attacks]),
                               baseline="cublas_stack" if device == "cuda" else "torch_stack",
                               dtype="float16" if device == "cuda" else "float32",
                               tol="2e-2" if device == "cuda" else "1e-4",
                               # fp16 at the baseline's own tolerance cannot see these two canaries
                               # (as the shipped flash lines); this line judges times, not the gate.
                               weak='accept_weak = ["scale_1pct", "drop_last_key"]' if device == "cuda" else "",
                               # On the GPU the reference clock is read from the last half of
                               # warm-up, polled at 200 Hz: 5 ms held a reading half the time
                               # (a config then reads `throttled`, clocks unverified, as it should).
                               warmup_ms=WARMUP_MS[device], seq_len=SEQ_LEN[device])
    repo = init_repo(tmp_path / "proj", {"attacks": text})
    plugin = installed_dist(tmp_path / "site", "attacks", "0.1", "[bench.kernels]\nattacks = attack_kernels\n",
                            {"attack_kernels": PLUGIN})
    env = {**bench_env(), "PYTHONPATH": os.pathsep.join([str(plugin), bench_env()["PYTHONPATH"]])}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    # On the GPU the sweep measures the device's ceilings, so every call also meets the floor.
    sweep = ("sweep", "attacks") if device == "cuda" else ("sweep", "attacks", "--no-ceilings")
    for args in (("register", "attacks"), sweep):
        r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, capture_output=True, text=True,
                           env=env, timeout=900)
        assert r.returncode == 0, r.stderr + r.stdout
    from harness.ledger.format import read_rows

    got = {r.candidate: r for r in read_rows(repo / "ledger" / "attacks.jsonl")
           if r.kind in ("result", "incorrect", "crashed", "skipped", "throttled")}
    for name, kind, tag in attacks:
        row = got[name]
        assert row.kind == kind, (name, row.tag, row.reason)
        if tag is not None:
            assert row.tag.removeprefix("timed_") == tag, (name, row.tag, row.reason)
        else:
            assert not row.impossible, row.impossible


def test_a_state_change_by_a_lead_call_is_blamed_on_its_own_arm():
    # Lead calls run before the timed call, inside its before step: whatever they change is
    # that arm's, never the arm that ran before it (the watch runs ahead of the leads).
    import torch

    from harness.measurement.timing import CallHooks, TimingPolicy, measure
    from tests.timers import ScriptedTimer

    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    watch = TimedWatch(capture())
    arms = {"honest": lambda s: None, "liar": lambda s: torch.set_num_threads(other)}
    measure(arms, n_slots=2, device="cpu", timer=ScriptedTimer({"honest": 1.0, "liar": 1.0}),
            hooks=CallHooks(watch=watch.before),
            policy=TimingPolicy(mode="hot", lead_calls=1, warmup_ms=1.0, min_samples=5, max_samples=10,
                                min_time_ms=0.0, noise_target=0.5, timeout_s=60))
    watch.settle()
    assert set(watch.moved) == {"liar"} and torch.get_num_threads() == before


def test_pinning_num_threads_needs_the_schema_that_introduced_it():
    # An older bench would refuse the flag as unknown: the file must say schema 2 ("upgrade bench").
    from pathlib import Path

    from harness.registration.schema import from_table

    raw = {"schema": 1, "hypothesis": "h", "candidates": ["sdpa"], "baseline": "torch_stack",
           "grid": {"batch": [1], "heads": [2], "seq_len": [32], "head_dim": [16], "dtype": ["float32"]},
           "correctness": {"atol": {"float32": 1e-5}, "rtol": {"float32": 1e-4}, "seeds": [0]},
           "numerics": {"num_threads": 2}, "bar": {"go": "pass_rate == 1.0", "prediction": 1.0}}
    with pytest.raises(UserError, match=r"\[numerics\] num_threads needs schema = 2"):
        from_table(raw, Path("registrations/t.toml"), "0" * 64)
    reg = from_table({**raw, "schema": 2}, Path("registrations/t.toml"), "0" * 64)
    assert reg.numerics.as_dict() == {"num_threads": 2}
