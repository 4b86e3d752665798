"""Ceilings: the data type, the ledger round trip, the reductio, and a CPU measurement."""

from __future__ import annotations

import json
import math

import pytest

from harness.errors import UserError
from harness.measurement.ceilings import (CPU_COPY_BYTES, CPU_COPY_REPS, CPU_MATMUL_GROW_MS, CPU_MATMUL_REPS,
                                          CPU_MATMUL_SIZES, CPU_WARMUP,
                                          DATASHEET_PEAKS, IMPOSSIBLE_MARGIN, RATE_UNITS, TF32_KEY, Ceilings,
                                          device_fingerprint, implausible, impossible, measure_ceilings)
from tests.timers import ScriptedTimer


def _h200_like() -> Ceilings:
    # Numbers of the order KINDS.md records for an H200 (copy ~4.3 TB/s, bf16 ~790 TFLOP/s).
    return Ceilings(device="cuda", fingerprint={"device": "cuda", "name": "NVIDIA H200", "driver": "580.159.03",
                                                "cuda": "13.0", "torch": "2.11.0"},
                    copy_gbps=4300.0,
                    matmul_tflops={"float16": 780.0, "bfloat16": 790.0, "float32": 50.0, TF32_KEY: 380.0})


def test_seed_004_rate_is_impossible():
    # The llama-bench decode artifact: 66.8 MB x 48 layers in 0.333 ms = 9.6 TB/s on a machine
    # whose copy rate is far lower.
    gbps = 66.8e6 * 48 / 0.333e-3 / 1e9
    assert gbps == pytest.approx(9628, rel=1e-3)
    why = impossible({"gbps": gbps}, _h200_like(), "float16")
    assert why is not None and "copy bandwidth" in why and "2.24x" in why


def test_reasonable_results_pass_and_margin_is_named():
    c = _h200_like()
    assert impossible({"tflops": 700.0, "gbps": 4000.0}, c, "bfloat16") is None
    # Just inside and just outside the margin.
    assert impossible({"gbps": 4300.0 * (1 + IMPOSSIBLE_MARGIN) * 0.999}, c, "float16") is None
    assert impossible({"gbps": 4300.0 * (1 + IMPOSSIBLE_MARGIN) * 1.001}, c, "float16") is not None
    assert impossible({"tflops": 790.0 * 1.2}, c, "bfloat16", margin=0.1) is not None
    assert impossible({"tflops": 790.0 * 1.2}, c, "bfloat16", margin=0.3) is None
    with pytest.raises(UserError):
        impossible({"tflops": 1.0, "gbps": 1.0}, c, "float16", margin=-0.1)


def test_float32_judged_against_tf32_and_non_finite_rejected():
    c = _h200_like()
    # 200 TFLOP/s in float32 beats plain fp32 4x but is possible with TF32 tensor cores.
    assert impossible({"tflops": 200.0}, c, "float32") is None
    assert "float32 matmul" in impossible({"tflops": 600.0}, c, "float32")
    assert "not finite" in impossible({"tflops": math.inf}, c, "float16")
    assert "not finite" in impossible({"gbps": math.nan}, c, "float16")
    both = impossible({"tflops": 5000.0, "gbps": 20000.0}, c, "float16")
    assert "TFLOP/s" in both and "GB/s" in both


def test_every_rate_a_row_carries_is_judged_against_its_ceiling_and_the_reason_names_both():
    """Issue 47: every rate with a ``*_frac`` (the metric table's) has a ceiling it is held to —
    kv_gbps too, which nothing judged — and the reason names the rate, the ceiling and its row."""
    from harness.vocab.metrics import CEILING_RATES

    assert set(CEILING_RATES) == set(RATE_UNITS)
    c = _h200_like()
    where = "ledger/_device_ceilings.jsonl row 3 (0123456789ab)"
    why = impossible({"tflops": None, "gbps": 4000.0, "kv_gbps": 4300.0 * 1.5}, c, "float16", source=where)
    assert why == (f"kv_gbps 6450 GB/s is 1.50x the measured copy bandwidth 4300 GB/s (the ceilings of {where}; "
                   f"more than 1.30x is impossible: count the bytes again, check for cache-resident data or "
                   f"skipped work)")
    both = impossible({"tflops": 1200.0, "gbps": 6000.0}, c, "float16")
    assert both == ("tflops 1200 TFLOP/s is 1.54x the measured float16 matmul rate 780 TFLOP/s; gbps 6000 GB/s is "
                    "1.40x the measured copy bandwidth 4300 GB/s (more than 1.30x is impossible: count the FLOPs and "
                    "bytes again, check for cache-resident data or skipped work)")
    with pytest.raises(KeyError, match="no ceiling bounds rate 'ms'"):
        impossible({"ms": 1.0}, c, "float16")


def test_a_cpu_flop_rate_is_held_to_the_fastest_dtypes_matmul_as_the_floor_holds_it():
    from harness.measurement.floor import matmul_ceiling

    cpu = Ceilings(device="cpu", fingerprint={}, copy_gbps=10.0, matmul_tflops={"bfloat16": 0.001, "float32": 0.1})
    assert cpu.bound("tflops", "bfloat16") == (0.1, "matmul rate (fastest: float32)")
    assert matmul_ceiling(cpu, "bfloat16") == 0.1 and matmul_ceiling(_h200_like(), "float32") == 380.0
    assert impossible({"tflops": 0.05}, cpu, "bfloat16") is None  # 50x bf16's own short measurement
    assert "fastest: float32" in impossible({"tflops": 0.2}, cpu, "bfloat16")


def test_a_ceiling_beyond_its_datasheet_peak_is_implausible():
    """Issue 47: no measurement of an H200 goes past the H200's datasheet (by more than the margin)."""
    c = _h200_like()
    assert implausible(c) is None
    peak = DATASHEET_PEAKS["NVIDIA H200"]
    near = Ceilings(device="cuda", fingerprint=c.fingerprint, copy_gbps=peak["memory_gbps"] * 1.3 * 0.999,
                    matmul_tflops={"float16": peak["float16"] * 1.3 * 0.999})
    assert implausible(near) is None
    fast = Ceilings(device="cuda", fingerprint=c.fingerprint, copy_gbps=9000.0,
                    matmul_tflops={"bfloat16": 790.0, "float16": 1400.0})
    why = implausible(fast)
    assert why == ("its copy bandwidth 9000 GB/s is 1.88x the NVIDIA H200 datasheet's 4800 GB/s; its float16 "
                   "matmul rate 1400 TFLOP/s is 1.42x the NVIDIA H200 datasheet's 989 TFLOP/s (more than 1.30x a "
                   "datasheet peak is impossible)")
    # No datasheet, no judgement here: another GPU's name, or a CPU (the sweep's rates judge those).
    other = Ceilings(device="cuda", fingerprint={"name": "NVIDIA H200 NVL"}, copy_gbps=9000.0, matmul_tflops={})
    assert implausible(other) is None
    assert implausible(Ceilings(device="cpu", fingerprint={"name": "NVIDIA H200"}, copy_gbps=9000.0,
                                matmul_tflops={})) is None


def test_row_round_trip_through_json_and_ledger_extras():
    c = _h200_like()
    row = json.loads(json.dumps(c.to_row()))
    row.update({"seq": 3, "kind": "ceilings", "hash": "ab" * 32})  # ledger columns are ignored
    back = Ceilings.from_row(row)
    assert back == c
    assert back.to_row() == c.to_row()
    assert back.matches(c.fingerprint)
    assert not back.matches({**dict(c.fingerprint), "driver": "999"})


def test_frozen_and_validated():
    c = _h200_like()
    with pytest.raises(Exception):
        c.copy_gbps = 1.0
    with pytest.raises(TypeError):
        c.matmul_tflops["float16"] = 1.0
    with pytest.raises(UserError):
        Ceilings.from_row({"device": "cuda", "copy_gbps": 1.0})
    with pytest.raises(UserError):
        Ceilings(device="cuda", fingerprint={}, copy_gbps=0.0, matmul_tflops={})
    with pytest.raises(UserError):
        Ceilings(device="cuda", fingerprint={}, copy_gbps=1.0, matmul_tflops={"int8": 1.0})
    with pytest.raises(UserError):
        Ceilings(device="tpu", fingerprint={}, copy_gbps=1.0, matmul_tflops={})


# "Fast" as work, not wall time (a loaded machine stretches wall time): the CPU ceilings
# move at most this many bytes; their matmuls grow only while a call is fast (the sizes below).
CPU_CEILINGS_MAX_BYTES = 1024**3


def test_cpu_measurement_is_fast_and_sane():
    c = measure_ceilings("cpu")
    m = c.method
    calls = m["copy_reps"] + CPU_WARMUP
    assert 2 * m["copy_bytes"] * calls <= CPU_CEILINGS_MAX_BYTES, m  # read + write per copy
    # Sizes grow only while a call is fast: every dtype starts at the smallest, runs them in
    # order, and its ceiling is read at one of them.
    assert set(m["matmul_sizes"]) == {"float16", "bfloat16", "float32"}
    for key, run in m["matmul_sizes"].items():
        assert list(run) == list(CPU_MATMUL_SIZES[:len(run)]) and m["matmul_n"][key] in run, m
    assert c.device == "cpu" and m["timer"] == "perf_counter, median"
    assert set(c.matmul_tflops) == {"float16", "bfloat16", "float32"}
    # Any CPU copies faster than 10 MB/s and slower than 10 TB/s; matmul below 100 TFLOP/s.
    assert 0.01 < c.copy_gbps < 10_000
    assert all(0 < v < 100 for v in c.matmul_tflops.values())
    assert c.fingerprint == device_fingerprint("cpu")
    assert Ceilings.from_row(c.to_row()) == c
    with pytest.raises(UserError):
        measure_ceilings("tpu")


def test_ceilings_time_through_the_timer_seam():
    # The rates are the medians of what the timer read, one scripted arm per quantity and size:
    # the median discards the one outlier in each. A size whose call reads CPU_MATMUL_GROW_MS or
    # more is the last (fp16 here, at the first size); the ceiling is the best rate read (bf16's
    # at the middle size, float32's at the largest).
    slow, small, mid, large = CPU_MATMUL_SIZES[0], CPU_MATMUL_SIZES[0], CPU_MATMUL_SIZES[1], CPU_MATMUL_SIZES[2]

    def arm(ms):
        return [ms] * (CPU_MATMUL_REPS - 1) + [ms / 4]

    copy = [4.0] * (CPU_COPY_REPS - 1) + [400.0]
    script = {"copy": copy, f"matmul float16 n{slow}": arm(CPU_MATMUL_GROW_MS),
              f"matmul bfloat16 n{small}": arm(2.0), f"matmul bfloat16 n{mid}": arm(4.0),
              f"matmul bfloat16 n{large}": arm(CPU_MATMUL_GROW_MS * 2),
              f"matmul float32 n{small}": arm(1.0), f"matmul float32 n{mid}": arm(8.0),
              f"matmul float32 n{large}": arm(16.0)}
    timer = ScriptedTimer(script)
    c = measure_ceilings("cpu", timer=timer)
    assert c.copy_gbps == pytest.approx(2 * CPU_COPY_BYTES / 4e-3 / 1e9)
    rate = {k: 2.0 * n**3 / (ms * 1e-3) / 1e12 for k, n, ms in
            (("float16", slow, CPU_MATMUL_GROW_MS), ("bfloat16", mid, 4.0), ("float32", large, 16.0))}
    assert c.matmul_tflops == pytest.approx(rate)
    assert c.method["matmul_n"] == {"float16": slow, "bfloat16": mid, "float32": large}
    assert c.method["matmul_sizes"] == {"float16": [slow], "bfloat16": list(CPU_MATMUL_SIZES),
                                        "float32": list(CPU_MATMUL_SIZES)}
    # Timed calls only: the warm-up calls run untimed, outside the timer.
    assert [a for a, _ in timer.calls].count("copy") == CPU_COPY_REPS
    assert len(timer.calls) == CPU_COPY_REPS + (len(script) - 1) * CPU_MATMUL_REPS
    assert c.method["timer"] == "scripted, median"


@pytest.mark.gpu
def test_cuda_measurement():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    c = measure_ceilings("cuda")
    assert set(c.matmul_tflops) == {"float16", "bfloat16", "float32", TF32_KEY}
    assert c.copy_gbps > 100
    assert c.matmul_tflops["bfloat16"] > c.matmul_tflops["float32"]
    assert c.fingerprint["name"] == torch.cuda.get_device_name()
    assert c.method["timer"] == "cuda events, median"
    assert implausible(c) is None  # within its datasheet (DATASHEET_PEAKS), where one is known
