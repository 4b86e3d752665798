"""The measurement's documented goals, checked on a real GPU (run on the device).

Real `bench register` + `bench sweep` of the shipped example line (cold mode, as shipped),
the same line in graph mode, and a large grid up to seq_len 32k, each in a fresh git
repository; then the harness's timer against ``triton.testing``'s on the same calls.
Goals (docs/measurement.md#validation-runs-on-the-h200-issue-3, "Measurement you can trust"): the control arm (the baseline
timed again as its own arm) has a median within ±0.5% of 1 and every config within ±2%
(eager µs configs outside ±2% must be flagged rig-noisy, at most two of them); the VRAM
model predicts the measured peak within ±10%; NVML is polled at ≥ MIN_POLL_HZ during every
measurement; and the harness agrees with ``do_bench`` at ms scale (with lead calls) and
with ``do_bench_cudagraph`` in graph mode within ±3%.

    python3 -m pytest -q -m "gpu and slow" tests/test_measurement_validation.py
"""

from __future__ import annotations

import statistics
import textwrap

import pytest

from harness.ledger.format import read_rows
from harness.measurement.clocks import MIN_POLL_HZ
from harness.measurement.timing import DEFAULT_CONTROL_TOLERANCE
from tests.conftest import REPO, VRAM_TOLERANCE, init_repo, run_bench

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

# The control's median over a line: within this of 1.
CONTROL_MEDIAN_TOLERANCE = 0.005
# Eager µs configs (10-60 µs calls) are the rig's limit: this many of the example's 16 may
# leave ±2% (and must then be flagged rig-noisy, out of verdicts).
MAX_EAGER_CONTROLS_OUTSIDE = 2
# The harness's median against triton.testing's on the same call: within ±3%.
DO_BENCH_AGREEMENT = 0.03
# Untimed calls of the same arm before each timed one at ms scale: a GPU as busy as
# do_bench's back-to-back loop, whose power limit sets a compute-bound kernel's clock.
MS_SCALE_LEAD_CALLS = 3
# The example configs compared against do_bench_cudagraph (two kernels each).
GRAPH_COMPARE_CONFIGS = 8

LARGE = textwrap.dedent('''\
    schema = 1
    hypothesis = "the VRAM model predicts the peak of N x N attention up to 32k keys"
    workload = "attention"
    candidate = "sdpa"
    baseline = "torch_stack"

    [grid]
    batch = [1]
    heads = [16]
    seq_len = [4096, 8192, 16384, 32768]
    head_dim = [128]
    dtype = ["float16"]
    causal = [false]

    [correctness]
    atol = 2e-2
    rtol = 2e-2
    seeds = [0]
    families = ["normal"]
    # This line checks the VRAM model, not a kernel: at 4k-32k keys one dropped key or a 1%
    # scale error is below fp16 tolerances, as for the example line.
    accept_weak = ["scale_1pct", "drop_last_key"]

    # Few rounds (the point is VRAM), but a warm-up long enough for the settle rule to see
    # the power limiter: at N 32k a call is ~0.1 s and the clock sinks after ~1 s.
    [timing]
    mode = "cold"
    warmup_ms = 1000
    min_samples = 6
    max_samples = 12
    min_time_ms = 1
    timeout_s = 30

    [bar]
    go = "pass_rate == 1.0"
    prediction = 1.0
    ''')


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> dict[str, list[dict]]:
    """The latest result row per config of each line: example (as shipped), example-graph,
    vram-large (a sweep measures a rig-noisy pair again later; the later row is the one kept)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    example = (REPO / "registrations" / "example.toml").read_text()
    graph = example.replace('mode = "cold"', 'mode = "graph"')
    assert graph != example
    lines = {"example": example, "example-graph": graph, "vram-large": LARGE}
    root = init_repo(tmp_path_factory.mktemp("validation") / "proj", lines)
    out = {}
    for name in lines:
        for args in (("register", name), ("sweep", name, "--no-ceilings")):
            r = run_bench(root, *args)
            assert r.returncode == 0, (args, r.stdout[-3000:], r.stderr[-3000:])
        rows = read_rows(root / "ledger" / f"{name}.jsonl")
        latest = {r.config_key: r for r in rows if r.kind == "result"}  # ledger order: last wins
        out[name] = list(latest.values())
        assert out[name], [(r.kind, r.reason) for r in rows]
    return out


def _controls(rows):
    return [r.metrics["control"] for r in rows]


def test_example_line_control_meets_the_goal(swept):
    rows = swept["example"]
    assert len(rows) == 16
    controls = _controls(rows)
    assert abs(statistics.median(controls) - 1) <= CONTROL_MEDIAN_TOLERANCE, sorted(controls)
    outside = [r for r in rows if abs(r.metrics["control"] - 1) > DEFAULT_CONTROL_TOLERANCE]
    assert len(outside) <= MAX_EAGER_CONTROLS_OUTSIDE, [(r.config_key, r.metrics["control"]) for r in outside]
    assert all(r.rig_noisy for r in outside), [(r.config_key, r.rig_noise) for r in outside]


def test_graph_mode_control_within_2_percent_everywhere(swept):
    rows = swept["example-graph"]
    assert len(rows) == 16
    controls = _controls(rows)
    assert abs(statistics.median(controls) - 1) <= CONTROL_MEDIAN_TOLERANCE, sorted(controls)
    assert all(abs(c - 1) <= DEFAULT_CONTROL_TOLERANCE for c in controls), sorted(controls)


def test_vram_model_within_10_percent_of_the_measured_peak(swept):
    rows = [r for name in ("example", "vram-large") for r in swept[name]]
    assert len(swept["vram-large"]) == 4
    errors = {r.config_key: r.memory["predicted_peak_bytes"] / r.memory["measured_peak_bytes"] - 1
              for r in rows}
    assert all(abs(e) <= VRAM_TOLERANCE for e in errors.values()), errors


def test_nvml_polled_fast_enough_in_every_measurement(swept):
    for name, rows in swept.items():
        for r in rows:
            clock = r.timing["clock"]
            assert clock is not None and clock["source"] == "nvml", (name, r.config_key, r.timing.get("clock_note"))
            assert clock["poll_hz"] >= MIN_POLL_HZ, (name, r.config_key, clock)


def _one_arm(cfg, name: str, mapping: dict):
    """(call, Measurement): ``name`` timed by the harness alone on one input slot, and the
    same call for triton.testing (neither rotates inputs here)."""
    from harness import get_kernel
    from harness.measurement.timing import TimingPolicy, measure
    from harness.workloads.inputs import make_inputs

    fn = get_kernel(name).fn
    q, k, v = make_inputs(cfg, 0, "normal", "cuda")
    out = torch.empty_like(q)

    def call(slot=0):
        fn(q, k, v, out, causal=cfg.causal, scale=cfg.scale)

    return call, measure({name: call}, n_slots=1, policy=TimingPolicy.from_mapping(mapping), device="cuda")


@pytest.mark.parametrize("seq_len", [4096, 8192])
@pytest.mark.parametrize("kernel", ["torch_stack", "sdpa"])
def test_harness_agrees_with_do_bench_at_ms_scale(kernel, seq_len):
    # Cold mode (do_bench flushes the L2 before each call too), the harness's default policy
    # otherwise, with lead calls: the two protocols then time one clock.
    import triton.testing

    from harness.workloads import Config

    cfg = Config("attention", 1, 16, 16, seq_len, 128, "float16", False)
    call, m = _one_arm(cfg, kernel, {"mode": "cold", "lead_calls": MS_SCALE_LEAD_CALLS})
    ours = m.arms[kernel].stats.median
    theirs = triton.testing.do_bench(call, warmup=100, rep=500, return_mode="median")
    assert abs(ours / theirs - 1) <= DO_BENCH_AGREEMENT, (ours, theirs, m.clock_note)


def test_graph_mode_agrees_with_do_bench_cudagraph():
    # µs kernels: do_bench (eager) times the host's launch gaps, so the like-for-like
    # comparison is between the two launch-free protocols, both replaying CUDA graphs.
    import triton.testing

    import tomllib

    from harness.registration.schema import load

    path = REPO / "registrations" / "example.toml"
    reg = load(path)
    policy = {**tomllib.loads(path.read_text())["timing"], "mode": "graph"}
    diffs = {}
    for cfg in reg.configs[:GRAPH_COMPARE_CONFIGS]:
        for kernel in (reg.baseline, *reg.candidates):
            call, m = _one_arm(cfg, kernel, policy)
            theirs = triton.testing.do_bench_cudagraph(call, rep=100, return_mode="median")
            diffs[cfg.key(), kernel] = m.arms[kernel].stats.median / theirs - 1
    assert all(abs(d) <= DO_BENCH_AGREEMENT for d in diffs.values()), diffs
