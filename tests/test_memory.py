"""The VRAM model's arithmetic, and the skip path of a sweep that cannot fit."""

from __future__ import annotations

import math

from harness import get_kernel
from harness.measurement import memory
from harness.measurement.correctness.vram import gate_bytes
from harness.measurement.timing import TimingPolicy, flush_bytes
from harness.pipeline.run import run_config
from harness.workloads import Config
from harness.workloads.inputs import generation_bytes
from harness.workloads.shipped import ATTENTION
from tests.conftest import sweep_context

H200_L2 = 60 * 2**20
CFG = Config("attention", 1, 16, 16, 4096, 128, "float16", False)


def _sizes(cfg):
    qs, ks, _ = cfg.shapes()
    q = math.prod(qs) * cfg.elem_bytes
    return q, q + 2 * math.prod(ks) * cfg.elem_bytes


def test_stack_workspace_is_scores_plus_float32_probabilities():
    n2 = 16 * 4096 * 4096
    assert get_kernel("torch_stack").extra_bytes(CFG) == n2 * (2 + 4)
    causal = Config("attention", 1, 16, 16, 4096, 128, "float16", True)
    assert get_kernel("torch_stack").extra_bytes(causal) == n2 * 6 + 4096 * 4096  # + the bool mask


def test_cold_mode_on_cuda_adds_flush_outputs_and_library_workspace():
    specs = [get_kernel("torch_stack"), get_kernel("sdpa")]
    pred = memory.predict(CFG, specs, TimingPolicy(mode="cold"), "cuda", workload=ATTENTION, l2_bytes=H200_L2)
    out, inputs = _sizes(CFG)
    stack = specs[0].extra_bytes(CFG)
    # candidate, baseline, control outputs, and each arm's copy of its randomly chosen call's,
    # and of a call on refreshed content of each kind (in place, fresh buffers); between calls
    # the larger of the stack's workspace and a new input set being drawn (with its scratch)
    timing = (inputs + 3 * out + 3 * out + 2 * 3 * out + flush_bytes(H200_L2)
              + max(stack, inputs + generation_bytes(CFG, "cuda")))
    assert pred.breakdown["timing_phase"] == timing
    assert pred.breakdown["flush"] == max(4 * H200_L2, 256 * 2**20)
    # two kernels gated together: both first-call outputs are alive beside the running call's two
    gate = max(3 * inputs + 4 * out + math.prod(CFG.shapes()[0]) * 8 + stack, gate_bytes(CFG, ATTENTION, 2))
    assert pred.peak_bytes == max(gate, timing, pred.breakdown["checks_phase"], pred.breakdown["recheck_phase"],
                                  pred.breakdown["generation_phase"]) + memory.LIBRARY_WORKSPACE_BYTES


def test_generation_scratch_is_bounded_and_counted(monkeypatch):
    from harness.workloads import inputs
    from harness.workloads.inputs import GEN_BYTES_PER_ELEM, GEN_CHUNK, generation_bytes

    # The torch path's scratch (a CPU, or a GPU without Triton), whatever this machine has.
    monkeypatch.setattr(inputs, "use_fused_draw", lambda device, dtype: False)

    big = Config("decode", 64, 32, 8, 32768, 128, "float16", False)
    assert generation_bytes(big) == GEN_BYTES_PER_ELEM * GEN_CHUNK        # chunked: not 2 G elements
    tiny = Config("attention", 1, 2, 2, 64, 16, "float16", False)
    assert generation_bytes(tiny) == GEN_BYTES_PER_ELEM * 2 * 64 * 16      # the largest tensor
    specs = [get_kernel("torch_stack"), get_kernel("sdpa")]
    pred = memory.predict(big, specs, TimingPolicy(mode="hot"), "cuda", workload=ATTENTION, l2_bytes=H200_L2)
    b = pred.breakdown
    timed = b["n_slots"] * b["inputs_per_slot"] + b["n_slots"] * b["n_arms"] * b["out"]
    assert b["generation_phase"] == timed + GEN_BYTES_PER_ELEM * GEN_CHUNK
    # The one-pass draw writes straight into the tensors: no scratch in the model.
    monkeypatch.setattr(inputs, "use_fused_draw", lambda device, dtype: device == "cuda")
    assert generation_bytes(big, "cuda") == 0 and generation_bytes(big, "cpu") == GEN_BYTES_PER_ELEM * GEN_CHUNK
    b = memory.predict(big, specs, TimingPolicy(mode="hot"), "cuda", workload=ATTENTION, l2_bytes=H200_L2).breakdown
    assert b["generation_phase"] == timed


def test_cpu_has_no_flush_or_library_workspace():
    specs = [get_kernel("torch_stack"), get_kernel("sdpa")]
    pred = memory.predict(CFG, specs, TimingPolicy(mode="cold"), "cpu", workload=ATTENTION)
    assert pred.breakdown["flush"] == 0 and pred.breakdown["library_workspace"] == 0
    assert pred.breakdown["n_slots"] == 1


def test_hot_mode_rotates_enough_copies_to_defeat_l2():
    small = Config("attention", 1, 2, 2, 256, 64, "float16", False)
    specs = [get_kernel("torch_stack"), get_kernel("sdpa")]
    pred = memory.predict(small, specs, TimingPolicy(mode="hot"), "cuda", workload=ATTENTION, l2_bytes=H200_L2)
    _, inputs = _sizes(small)
    assert pred.breakdown["n_slots"] * inputs >= 4 * H200_L2 or pred.breakdown["n_slots"] == 256
    assert pred.breakdown["flush"] == 0


def test_graph_mode_keeps_every_capture_workspace():
    specs = [get_kernel("torch_stack"), get_kernel("sdpa")]
    graph = memory.predict(CFG, specs, TimingPolicy(mode="graph"), "cuda", workload=ATTENTION, l2_bytes=H200_L2)
    out, inputs = _sizes(CFG)
    stack, sdpa = (s.extra_bytes(CFG) for s in specs)
    # 67 MB read and written per call: rotated past 4 × L2 as in hot mode (4 copies); every slot's captures
    # (baseline and control each a stack workspace, the candidate its own) stay alive in
    # the graph pool; no flush buffer
    n = graph.breakdown["n_slots"]
    assert n == math.ceil(4 * H200_L2 / (inputs + out)) == 4
    assert graph.breakdown["flush"] == 0
    # + spot copies, refreshed-call copies (in place only: one kind), and the scratch of drawing new content in place
    # beside the graph pool (graph mode refreshes in place only: no new input set)
    assert graph.breakdown["timing_phase"] == (n * (inputs + 3 * out + 2 * stack + sdpa) + 3 * out + 3 * out
                                               + generation_bytes(CFG, "cuda"))


def test_graph_mode_rotates_a_kv_cache_but_not_tiny_inputs():
    from harness.measurement.timing import GRAPH_MAX_ROTATION_SLOTS

    graph = TimingPolicy(mode="graph")
    # decode at B 1, 8k keys: 33.6 MB of K+V would sit in a 60 MB L2 on one copy
    decode = Config("decode", 1, 32, 8, 8192, 128, "float16", False)
    n = memory.timing_slots(decode, graph, "cuda", H200_L2, workload=ATTENTION)
    assert 2 <= n <= GRAPH_MAX_ROTATION_SLOTS and n == memory.timing_slots(decode, TimingPolicy(mode="hot"),
                                                                           "cuda", H200_L2, workload=ATTENTION)
    # a µs kernel on 0.5 MB: 480 copies would be 480 captured graphs per arm; one copy, as
    # do_bench_cudagraph times it
    tiny = Config("attention", 2, 4, 4, 128, 64, "float32", False)
    assert memory.timing_slots(tiny, graph, "cuda", H200_L2, workload=ATTENTION) == 1
    assert memory.timing_slots(tiny, TimingPolicy(mode="hot"), "cuda", H200_L2,
                               workload=ATTENTION) > GRAPH_MAX_ROTATION_SLOTS
    assert memory.timing_slots(decode, graph, "cpu", H200_L2, workload=ATTENTION) == 1


def test_config_that_cannot_fit_is_skipped_with_both_numbers():
    huge = Config("attention", 64, 64, 64, 65536, 128, "float32", False)  # the stack alone: ~8 PB
    ctx = sweep_context()
    (row,) = run_config(huge, ("sdpa",), ctx)
    assert row.kind == "skipped"
    assert row.payload["predicted_bytes"] > row.payload["available_bytes"] > 0
    assert "predicted peak" in row.payload["reason"] and "available" in row.payload["reason"]


def test_unsupported_candidate_gets_a_row_not_silence():
    cfg = Config("attention", 1, 2, 2, 32, 16, "float32", False)
    ctx = sweep_context()
    (row,) = run_config(cfg, ("cublas_stack",), ctx)
    assert row.kind == "unsupported" and "cuda" in row.payload["reason"]


def test_an_autotuners_first_call_buffer_counts_in_the_gate_only():
    # triton_flash's first call of a shape autotunes (a 256 MiB L2-flush buffer, freed after);
    # later calls allocate nothing. The gate makes the first call: the buffer is counted
    # there and not in the timing or recheck phases (it over-predicted flash-h200 at N 1024
    # by 27% when it was every call's extra).
    from bench_kernels.triton_flash import AUTOTUNE_FLUSH_BYTES
    from harness.measurement.correctness.figures import use_fused

    flash = get_kernel("triton_flash")
    cfg = Config("attention", 4, 16, 16, 1024, 128, "float16", False)
    assert flash.extra_bytes(cfg) == 0 and flash.first_call_bytes(cfg) == AUTOTUNE_FLUSH_BYTES
    specs = [get_kernel("sdpa"), flash]
    pred = memory.predict(cfg, specs, TimingPolicy(mode="hot"), "cuda", workload=ATTENTION, l2_bytes=H200_L2)
    b = pred.breakdown
    out, inputs = _sizes(cfg)
    ref_out = math.prod(cfg.shapes()[0]) * 8
    assert b["first_call_workspace"] == {"sdpa": 0, "triton_flash": AUTOTUNE_FLUSH_BYTES}
    # compare() on a GPU with Triton: the one-pass table, no float64 blocks (figures_fused.py)
    assert b["gate_phase"] == max(3 * inputs + 4 * out + ref_out + AUTOTUNE_FLUSH_BYTES,
                                  gate_bytes(cfg, ATTENTION, 2, use_fused("cuda")))
    timed = b["n_slots"] * inputs + b["n_slots"] * b["n_arms"] * out
    spot = b["n_arms"] * out  # each arm's copy of its randomly chosen timed call's output
    refreshed = 2 * b["n_arms"] * out  # and of a call on refreshed content, of each kind
    # Between calls, the larger of the steady workspace (sdpa's) and a new input set being drawn.
    assert b["timing_phase"] == timed + spot + refreshed + max(specs[0].extra_bytes(cfg),
                                                              inputs + generation_bytes(cfg, "cuda"))
    from harness.measurement.correctness.checks import REFERENCE_MEMO_SIZE
    from harness.measurement.correctness.vram import compare_bytes, judge_bytes
    from harness.measurement.reference import reference_bytes

    # Judging one output: the reference while it is computed, or its output beside compare's
    # blocks, never both (the reference's scratch is freed first).
    fused = use_fused("cuda")
    assert judge_bytes(cfg, ATTENTION, fused) >= max(reference_bytes(cfg), ref_out + compare_bytes(math.prod(cfg.shapes()[0]), fused))
    kept = (REFERENCE_MEMO_SIZE - 1) * ref_out  # references kept for the other arms on the same inputs
    # The checks of timed outputs: one regenerated earlier content beside the spot and refresh copies.
    assert b["checks_phase"] == timed + spot + refreshed + inputs + kept + judge_bytes(cfg, ATTENTION, fused)
    # The recheck: pristine inputs, two snapshots; the candidate's workspace (none) or judging.
    assert b["recheck_phase"] == timed + inputs + 2 * out + kept + judge_bytes(cfg, ATTENTION, fused)


def test_a_config_reads_the_memory_available_only_after_earlier_garbage_is_collected(monkeypatch):
    """One collection per config, before its budget reads the memory available and its peak
    count starts: tensors an earlier config left in reference cycles must not make a config
    that fits skip, nor count in its peak (issue 32: it used to collect twice per config)."""
    import gc

    import torch

    from harness.pipeline import run

    class Left:
        freed = False

        def __del__(self):
            Left.freed = True

    seen = {}
    real_budget = run.budget

    def budget(task, ctx):
        seen["freed"] = Left.freed
        return real_budget(task, ctx)

    monkeypatch.setattr(run, "budget", budget)
    gc.disable()
    try:
        junk = Left()
        junk.self, junk.buffer = junk, torch.empty(1 << 20)  # a reference cycle: only a collection frees it
        del junk
        assert not Left.freed
        (row,) = run_config(Config("attention", 1, 2, 2, 32, 16, "float32", False), ("sdpa",), sweep_context(
            timing={"warmup_ms": 1, "min_samples": 5, "max_samples": 20, "min_time_ms": 1, "timeout_s": 10}))
    finally:
        gc.enable()
    assert seen == {"freed": True}
    assert row.kind == "result", row.payload.get("reason")
