"""The timing path: every timed number in bench goes through here.

    policy.py   TimingPolicy (the [timing] knobs, validated), flush and rotation sizing
    timers.py   the Timer protocol (the test seam), HostTimer, CudaEventTimer, median_ms
    orders.py   round orders: which arm runs when, balanced against carry-over
    graphs.py   CUDA-graph capture for graph mode
    measure.py  measure(): the protocol (prime, warm up, settle, rounds, result), step by step
    results.py  Round, ArmResult, Measurement (frozen, raw samples kept) and its ledger form
    empty.py    the empty window: what a window holding nothing reads; told_apart

The names below are re-exported so ``from harness.measurement.timing import X`` works for
what most callers need.
"""

from harness.measurement.timing.empty import EMPTY_WINDOW_FACTOR, EmptyWindow, empty_window, told_apart
from harness.measurement.timing.measure import measure
from harness.measurement.timing.orders import round_orders
from harness.measurement.timing.policy import (
    DEFAULT_CONTROL_TOLERANCE, DEFAULT_WATCHDOG_S, FLUSH_FLOOR_BYTES, GRAPH_MAX_ROTATION_SLOTS, L2_FLUSH_FACTOR,
    MAX_ROTATION_SLOTS, MODES, ROTATION_FACTOR, TimingPolicy, device_l2_bytes, flush_bytes, rotation_slots)
from harness.measurement.timing.results import (
    ARM_BASELINE, ARM_CANDIDATE, ARM_CONTROL, STOP_REASONS, ArmResult, Measurement, Round)
from harness.measurement.timing.timers import CudaEventTimer, HostTimer, Timer, median_ms

__all__ = [
    "ARM_BASELINE", "ARM_CANDIDATE", "ARM_CONTROL", "ArmResult", "CudaEventTimer", "DEFAULT_CONTROL_TOLERANCE",
    "DEFAULT_WATCHDOG_S", "EMPTY_WINDOW_FACTOR", "EmptyWindow", "FLUSH_FLOOR_BYTES", "GRAPH_MAX_ROTATION_SLOTS",
    "HostTimer", "L2_FLUSH_FACTOR", "MAX_ROTATION_SLOTS", "MODES", "Measurement", "ROTATION_FACTOR", "Round",
    "STOP_REASONS", "Timer", "TimingPolicy", "device_l2_bytes", "empty_window", "flush_bytes", "measure",
    "median_ms", "rotation_slots", "round_orders", "told_apart",
]
