"""Nsight Compute counters: parsing real H200 output, per-call reduction, the DRAM reductio.

The CSVs under tests/data/ncu/ are real ncu output (README there): fp16 B1 H16 N4096 D128,
triton_flash, cublas_stack and a hollow SDPA over half of K/V.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.ledger.rows import load
from harness.errors import UserError
from harness.measurement import counters
from harness.workloads import Config, formulas

DATA = Path(__file__).parent / "data" / "ncu"
CFG = Config("attention", 1, 16, 16, 4096, 128, "float16", False)
# The H200's L2 as the fixture's device attributes report it (and torch's L2_cache_size).
H200_L2 = 62_914_560


def launches(name: str = "raw-base.csv"):
    return counters.parse_csv((DATA / name).read_text())


def by_kernel(ls, kernel):
    return [launch for launch in ls if counters.in_range(launch, kernel)]


def test_parses_every_launch_of_the_real_output_with_its_nvtx_range():
    ls = launches()
    assert [launch.id for launch in ls] == [0, 1, 2, 3, 4]
    assert [len(by_kernel(ls, k)) for k in ("triton_flash", "cublas_stack", "hollow_half_kv")] == [1, 3, 1]
    flash = by_kernel(ls, "triton_flash")[0]
    assert flash.kernel == "_attn_fwd" and flash.grid == "(16, 16, 1)" and flash.block == "(256, 1, 1)"
    # Thousands separators, units row and the pre-header ncu lines are all handled.
    assert flash.metrics["dram_read_bytes"] == 51_201_024
    assert flash.metrics["dram_write_bytes"] == 5_931_264
    assert flash.metrics["registers"] == 254
    assert flash.metrics["tensor_pct"] == pytest.approx(53.16)
    assert flash.metrics["duration_ns"] == 296_224
    assert flash.metrics["shared_mem_dynamic_bytes"] == 163_896
    assert flash.metrics["occupancy_pct"] == pytest.approx(12.5)
    assert flash.metrics["local_load_bytes"] == 0 and flash.metrics["local_store_bytes"] == 0
    softmax = by_kernel(ls, "cublas_stack")[1]
    assert softmax.kernel.startswith("void softmax_rows<1>") and softmax.metrics["grid_size"] == 65_536


def test_default_and_base_units_read_the_same_quantities():
    a, b = launches("raw.csv"), launches("raw-base.csv")
    assert [x.kernel for x in a] == [x.kernel for x in b]
    for x, y in zip(a, b):  # two separate runs: counts agree to a fraction of a percent
        assert x.metrics["dram_read_bytes"] == pytest.approx(y.metrics["dram_read_bytes"], rel=0.01)
        assert x.metrics["registers"] == y.metrics["registers"]


def test_per_call_counters_show_the_fused_kernel_never_stores_s():
    ls = launches()
    q_k_v = formulas.min_read_bytes(CFG)
    s_bytes = CFG.batch * CFG.heads * CFG.seq_len * CFG.seq_len * CFG.elem_bytes  # the score matrix, fp16
    flash = counters.per_call(by_kernel(ls, "triton_flash"), 1)
    stack = counters.per_call(by_kernel(ls, "cublas_stack"), 1)
    assert flash["launches"] == 1 and stack["launches"] == 3
    # Fused: q, k, v read about once; nothing S-sized written.
    assert q_k_v <= flash["dram_read_bytes"] <= 1.1 * q_k_v
    assert flash["dram_write_bytes"] < 0.05 * s_bytes
    # The stack: S written by the QKᵀ GEMM, read and rewritten by softmax, read by PV.
    assert stack["dram_read_bytes"] > 2 * s_bytes > 20 * q_k_v
    assert stack["dram_write_bytes"] > 1.9 * s_bytes  # the GPU test allows more slack (another run)
    assert stack["registers"] == 168  # the most of any launch (the GEMMs; softmax uses 18)
    assert flash["local_spill_bytes"] == 0 and stack["local_spill_bytes"] == 0
    assert flash["tensor_active"] == pytest.approx(0.5316)
    # Duration-weighted over the three launches: the long softmax (6%) dominates.
    ns = [x.metrics["duration_ns"] for x in by_kernel(ls, "cublas_stack")]
    pct = [x.metrics["tensor_pct"] for x in by_kernel(ls, "cublas_stack")]
    assert stack["tensor_active"] == pytest.approx(sum(a * b for a, b in zip(ns, pct)) / sum(ns) / 100)
    assert stack["duration_us"] == pytest.approx(sum(ns) / 1e3)
    halved = counters.per_call(by_kernel(ls, "cublas_stack") * 2, 2)  # two calls' launches
    assert halved["dram_read_bytes"] == pytest.approx(stack["dram_read_bytes"]) and halved["launches"] == 3


def test_reductio_flags_reads_below_what_any_correct_kernel_reads():
    ls = launches()
    need = formulas.min_read_bytes(CFG)
    hollow = counters.per_call(by_kernel(ls, "hollow_half_kv"), 1)["dram_read_bytes"]
    flash = counters.per_call(by_kernel(ls, "triton_flash"), 1)["dram_read_bytes"]
    assert hollow == pytest.approx(need * 2 / 3, rel=0.01)  # q plus half of k and v
    # At this size q, k and v (50 MB) fit the H200's 60 MB L2: reading less proves nothing.
    assert counters.counter_impossible(hollow, need, H200_L2) is None
    # With the same counts on a config 8x larger (B 4, N 8192: the GPU test's), it would.
    big = Config("attention", 4, 16, 16, 8192, 128, "float16", False)
    why = counters.counter_impossible(8 * hollow, formulas.min_read_bytes(big), H200_L2)
    assert why is not None and "never read" in why and "L2" in why
    assert counters.counter_impossible(8 * flash, formulas.min_read_bytes(big), H200_L2) is None
    assert counters.counter_impossible(hollow, need, None) is None  # no L2 size: no claim
    assert counters.counter_impossible(None, need, H200_L2) is None


def test_missing_metric_and_missing_table_fail_closed():
    text = (DATA / "raw-base.csv").read_text().replace('"dram__bytes_read.sum"', '"dram__bytes_read.total"')
    with pytest.raises(UserError, match="lacks metric"):
        counters.parse_csv(text)
    no_table = "==PROF== Connected to process 1 (python3)\n==WARNING== No kernels were profiled.\n"
    assert not counters.has_table(no_table)
    with pytest.raises(UserError, match="no CSV table"):
        counters.parse_csv(no_table)
    perm = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
            "Counters on the target device 0.")
    assert counters.counter_error("==PROF== x\n" + perm + "\n") == perm
    with pytest.raises(UserError, match="ERR_NVGPUCTRPERM"):
        counters.parse_csv(perm)


def test_ncu_missing_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(counters.NCU_ENV, raising=False)
    with pytest.raises(UserError, match="ncu\\) not found"):
        counters.ncu_path()
    monkeypatch.setenv(counters.NCU_ENV, str(tmp_path / "ncu"))
    with pytest.raises(UserError, match="not an executable ncu"):
        counters.ncu_path()


def test_ncu_options_filter_on_the_kernel_range_and_leave_clocks_alone():
    args = counters.ncu_args("log.csv", "triton_flash")
    joined = " ".join(args)
    assert "--clock-control none" in joined and "--cache-control all" in joined
    assert "--nvtx --nvtx-include bench_kernel:triton_flash/" in joined
    assert "--csv --page raw --print-units base --log-file log.csv" in joined
    measured = args[args.index("--metrics") + 1].split(",")
    assert "dram__bytes_read.sum" in measured and not any(m.startswith("launch__") for m in measured)


def test_counter_table_is_one_tidy_row_per_launch():
    from harness.measurement.profile import ProfileResult
    from harness.commands.profile import payload

    ls = launches()
    rows = []
    for seq, kernel in enumerate(("triton_flash", "cublas_stack")):
        inside = tuple(by_kernel(ls, kernel))
        res = ProfileResult(CFG, kernel, launches=inside, per_call=counters.per_call(list(inside), 1),
                            output_check={"passed": True}, l2_bytes=H200_L2)
        rows.append(load({"kind": "profile", "seq": seq, "commit": "c" * 40, **payload(res, "candidate", {"passed": True})}))
    rows.append(load({"kind": "result", "seq": 9}))
    df = counters.counter_table(rows)
    assert len(df) == 4 and list(df["launch"]) == [0, 0, 1, 2]
    assert list(df["candidate"]) == ["triton_flash"] + ["cublas_stack"] * 3
    assert {"config_key", "seq_len", "dtype", "kernel", "dram_read_bytes", "registers", "tensor_pct",
            "occupancy_pct", "impossible"} <= set(df.columns)
    assert df["dram_read_bytes"].iloc[0] == 51_201_024


@pytest.mark.parametrize("kernel, passed", [("sdpa", True), ("tests.zoo:half_kv_sdpa", False)])
def test_worker_runs_the_kernel_and_checks_what_it_wrote(tmp_path, kernel, passed):
    """The process ncu profiles, run without ncu on the CPU: it resolves registered and
    module:function kernels and reports the float64 check of the profiled call's output."""
    import json
    import subprocess
    import sys

    from conftest import REPO, bench_env

    cfg = Config("attention", 1, 2, 2, 64, 16, "float32", True)
    spec = {"config": cfg.as_dict(), "kernel": kernel, "name": kernel.rsplit(":", 1)[-1], "seed": 5, "atol": 1e-5,
            "rtol": 1e-4, "numerics": {}, "calls": 1, "result": str(tmp_path / "r.json"), "device": "cpu"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    res = subprocess.run([sys.executable, "-m", "harness.execution.profile_worker", str(tmp_path / "spec.json")],
                         cwd=REPO, env=bench_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout == "", res.stderr
    check = json.loads((tmp_path / "r.json").read_text())["output_check"]
    assert check["passed"] is passed and check["phase"] == "timed_output"
    if not passed:
        assert check["tag"] == "stale_mismatch" and "profiled call" in check["reason"]


def test_profile_table_renders_the_issue_table(capsys, monkeypatch):
    from harness.measurement.profile import ProfileResult
    from harness.commands.profile import payload
    from harness.reporting.render.console import console
    from harness.reporting.render.profile import render_profile

    ls = launches()
    rows = []
    for kernel in ("triton_flash", "cublas_stack", "hollow_half_kv"):
        inside = tuple(by_kernel(ls, kernel))
        per = counters.per_call(list(inside), 1)
        res = ProfileResult(CFG, kernel, launches=inside, per_call=per, output_check={"passed": True},
                            impossible=counters.counter_impossible(per["dram_read_bytes"], formulas.min_read_bytes(CFG), 0))
        rows.append(load({"kind": "profile", **payload(res, "candidate", {"passed": True})}))
    monkeypatch.setenv("COLUMNS", "200")
    console.cache_clear()  # a console bound to this test's captured stdout and width
    try:
        render_profile("t", rows)
        out = capsys.readouterr().out
    finally:
        console.cache_clear()
    assert "_attn_fwd" in out and "softmax_rows" in out and "51.2" in out and "537" in out
    assert "impossible hollow_half_kv" in out and "incorrect" not in out
