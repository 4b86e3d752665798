"""The timing path: every timed number in bench goes through here.

    policy.py   TimingPolicy (the [timing] knobs, validated), flush and rotation sizing
    timers.py   the Timer protocol (the test seam), HostTimer, CudaEventTimer, median_ms
                (ceilings); the sustained mode times through it too
    orders.py   round orders: which arm runs when, balanced against carry-over
    graphs.py   CUDA-graph capture for graph mode
    rounds.py   RoundRunner: one round of calls (slots, lead calls, prepare, flush, spot check)
    hooks.py    CallHooks: what the caller runs around each timed call (watch, refresh, prepare, spot)
    measure.py  measure(): the protocol (prime, warm up, settle, rounds, result), step by step
    summary.py  measure()'s state and the Measurement made of it (drops, throttle, clock checks)
    criteria.py  when the rounds stop ([timing] stop): NoiseStop, StatisticStop, the fixed maximum
    sustained.py  sustain(): the sustained mode, one arm back to back as do_bench times it
                (absolute rates at the clock a loop settles at); rates() of a config
    results.py  Round, ArmResult, Measurement (frozen, raw samples kept) and its ledger form
    empty.py    the empty window: what a window holding nothing reads; told_apart

The package re-exports every public name of its modules, so ``from
harness.measurement.timing import X`` works; import from the module to say which part.
"""

from harness.measurement.timing.criteria import (
    NOISE_REASON, PRECISION_REASON, REFRESH_EXTRA_ROUNDS, STATISTIC, WAIT_MAX_ROUNDS_FACTOR, Criterion, NoiseStop,
    Progress, Quantity, StatisticStop, StopRecord, bar_pairs, criterion_for, row_statistic)
from harness.measurement.timing.empty import (
    EMPTY_ARM, EMPTY_WINDOW_BUDGET, EMPTY_WINDOW_FACTOR, EmptyWindow, empty_window, told_apart)
from harness.measurement.timing.graphs import GRAPH_SIDE_WARMUP_CALLS, GRAPH_TARGET_SAMPLE_MS
from harness.measurement.timing.hooks import CallHooks
from harness.measurement.timing.measure import (
    CLOCK_SETTLE_TOLERANCE, TIME_EPS_S, WARMUP_MAX_EXTENSIONS, WARMUP_MIN_ROUNDS, WARMUP_SETTLE_MAX_EXTENSIONS,
    measure)
from harness.measurement.timing.orders import (
    MAX_PERMUTED_ARMS, ORDER_BLOCKS, ORDER_CANDIDATES, ORDER_LAGS, ORDER_SEED, round_orders)
from harness.measurement.timing.policy import (
    DEFAULT_CONTROL_TOLERANCE, DEFAULT_GRAPH_REPLAYS, DEFAULT_LEAD_CALLS, DEFAULT_MAX_DROP_FRACTION,
    DEFAULT_MAX_SAMPLES, DEFAULT_MIN_SAMPLES, DEFAULT_MIN_TIME_MS, DEFAULT_MODE, DEFAULT_NOISE_TARGET,
    DEFAULT_THROTTLE_THRESHOLD, DEFAULT_TIMEOUT_S, DEFAULT_WARMUP_MS, DEFAULT_WATCHDOG_S, FLUSH_FLOOR_BYTES,
    GRAPH_MAX_REPLAYS, GRAPH_MAX_ROTATION_SLOTS, L2_FLUSH_FACTOR, LEAD_CALLS_MAX, MAX_ROTATION_SLOTS, MODES,
    ROTATION_FACTOR, DEFAULT_ALPHA, DEFAULT_PRECISION, DEFAULT_STOP, MAX_ALPHA, MIN_ALPHA, STATISTIC_KEYS, STOPS,
    TimingPolicy, device_l2_bytes, flush_bytes, l2_flush, look_confidence, looks, rotation_slots)
from harness.measurement.timing.results import (
    ARM_BASELINE, ARM_CANDIDATE, ARM_CONTROL, STOP_REASONS, ArmClock, ArmResult, Measurement, Round)
from harness.measurement.timing.summary import REFERENCE_MIN_FRACTION, WAIT_REASON
from harness.measurement.timing.sustained import (
    BATCH_S, MAX_BATCH, MIN_CALLS, TIMED_S, WARM_S, SustainBudget, Sustained, rates, sustain)
from harness.measurement.timing.timers import (
    BLOCK_MAX_S, BLOCK_MIN_S, FALLBACK_SM_HZ, HOST_GAP_RETRIES, WAIT_DROP_MS, WAIT_SOURCE_SCHEDSTAT,
    WAIT_SOURCE_THREAD_TIME, CallCpu, CudaEventTimer, HostTimer, RunQueueClock, Timer, hold_stream, max_sm_hz,
    median_ms)

__all__ = [
    # policy
    "DEFAULT_CONTROL_TOLERANCE", "DEFAULT_GRAPH_REPLAYS", "DEFAULT_LEAD_CALLS", "DEFAULT_MAX_DROP_FRACTION",
    "DEFAULT_MAX_SAMPLES", "DEFAULT_MIN_SAMPLES", "DEFAULT_MIN_TIME_MS", "DEFAULT_MODE", "DEFAULT_NOISE_TARGET",
    "DEFAULT_THROTTLE_THRESHOLD", "DEFAULT_TIMEOUT_S", "DEFAULT_WARMUP_MS", "DEFAULT_WATCHDOG_S", "FLUSH_FLOOR_BYTES",
    "GRAPH_MAX_REPLAYS", "GRAPH_MAX_ROTATION_SLOTS", "L2_FLUSH_FACTOR", "LEAD_CALLS_MAX", "MAX_ROTATION_SLOTS",
    "MODES", "ROTATION_FACTOR", "TimingPolicy", "device_l2_bytes", "flush_bytes", "l2_flush", "rotation_slots",
    "DEFAULT_ALPHA", "DEFAULT_PRECISION", "DEFAULT_STOP", "MAX_ALPHA", "MIN_ALPHA", "STATISTIC_KEYS", "STOPS",
    "look_confidence", "looks",
    # stop criteria
    "NOISE_REASON", "PRECISION_REASON", "REFRESH_EXTRA_ROUNDS", "STATISTIC", "WAIT_MAX_ROUNDS_FACTOR", "Criterion",
    "NoiseStop", "Progress", "Quantity", "StatisticStop", "StopRecord", "bar_pairs", "criterion_for",
    "row_statistic",
    # timers
    "BLOCK_MAX_S", "BLOCK_MIN_S", "FALLBACK_SM_HZ", "HOST_GAP_RETRIES", "WAIT_DROP_MS", "WAIT_SOURCE_SCHEDSTAT",
    "WAIT_SOURCE_THREAD_TIME", "CallCpu", "CudaEventTimer", "HostTimer", "RunQueueClock", "Timer", "hold_stream",
    "max_sm_hz", "median_ms",
    # orders, graphs
    "MAX_PERMUTED_ARMS", "ORDER_BLOCKS", "ORDER_CANDIDATES", "ORDER_LAGS", "ORDER_SEED", "round_orders",
    "GRAPH_SIDE_WARMUP_CALLS", "GRAPH_TARGET_SAMPLE_MS",
    # measure, results
    "CLOCK_SETTLE_TOLERANCE", "REFERENCE_MIN_FRACTION", "TIME_EPS_S", "WAIT_REASON", "WARMUP_MAX_EXTENSIONS",
    "WARMUP_MIN_ROUNDS",
    "WARMUP_SETTLE_MAX_EXTENSIONS", "measure", "CallHooks",
    "ARM_BASELINE", "ARM_CANDIDATE", "ARM_CONTROL", "STOP_REASONS", "ArmClock", "ArmResult", "Measurement", "Round",
    # sustained mode
    "BATCH_S", "MAX_BATCH", "MIN_CALLS", "TIMED_S", "WARM_S", "SustainBudget", "Sustained", "rates", "sustain",
    # empty window
    "EMPTY_ARM", "EMPTY_WINDOW_BUDGET", "EMPTY_WINDOW_FACTOR", "EmptyWindow", "empty_window", "told_apart",
]
