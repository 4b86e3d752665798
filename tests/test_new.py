"""`bench new`: a commented registration from flags that `bench register` accepts as written."""

from __future__ import annotations

import os
import runpy
import tomllib

import pytest

from tests.conftest import REPO, git, installed_dist, run_bench

SMALL = ("--baseline", "torch_stack", "--seq-len", "64", "--heads", "2", "--kv-heads", "2", "--head-dim", "16")


def test_new_writes_a_registration_that_registers_as_written(repo):
    r = run_bench(repo, "new", "fresh", "--candidate", "sdpa", *SMALL, "--dtype", "float32", "--prediction", "1.2")
    assert r.returncode == 0, r.stderr
    path = repo / "registrations" / "fresh.toml"
    assert "bench register registrations/fresh.toml" in r.stdout and "waived" not in r.stdout
    text = path.read_text()
    raw = tomllib.loads(text)
    assert raw["candidate"] == "sdpa" and raw["baseline"] == "torch_stack" and raw["bar"]["prediction"] == 1.2
    assert raw["grid"]["seq_len"] == [64] and raw["grid"]["causal"] == [False, True]
    assert raw["correctness"]["atol"] == {"float32": 1e-4} and "accept_weak" not in raw["correctness"]
    assert "geomean(speedup) >= 1.05" in raw["bar"]["go"] and "5% faster than torch_stack" in raw["hypothesis"]
    assert text.count("\n# ") >= 10  # every section says what it means
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fresh")
    reg = run_bench(repo, "register", "registrations/fresh.toml")
    assert reg.returncode == 0, reg.stderr
    assert "registered line fresh" in reg.stdout


def test_new_waives_only_the_canaries_its_tolerance_cannot_reject_and_says_why(repo):
    r = run_bench(repo, "new", "half", "--candidate", "sdpa", *SMALL, "--dtype", "bfloat16", "--causal", "false",
                  "--prediction", "1.1")
    assert r.returncode == 0, r.stderr
    raw = tomllib.loads((repo / "registrations" / "half.toml").read_text())
    waived = raw["correctness"]["accept_weak"]
    assert waived and all(f"waived canary {w}" in r.stdout for w in waived)
    text = (repo / "registrations" / "half.toml").read_text()
    assert all(f"#   {w}: " in text and "would reject it" in text for w in waived)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "half")
    reg = run_bench(repo, "register", "registrations/half.toml")
    assert reg.returncode == 0, reg.stderr


def test_new_refuses_bad_input_in_one_line_and_writes_nothing(repo):
    before = sorted(p.name for p in (repo / "registrations").iterdir())
    tiny = (repo / "registrations" / "tiny.toml").read_text()
    cases = [
        (("tiny", "--candidate", "sdpa", "--prediction", "1"), "registrations/tiny.toml exists"),
        (("x", "--candidate", "nosuch", "--prediction", "1"), "unknown kernel 'nosuch'"),
        (("x", "--candidate", "sdpa", "--causal", "maybe", "--prediction", "1"), "--causal 'maybe'"),
        (("x", "--candidate", "sdpa", "--go", "min(speedup) >= 2", "--prediction", "1"), "--go without --hypothesis"),
        (("x", "--candidate", "sdpa", "--workload", "prefill", "--prediction", "1"), "--workload 'prefill'"),
        (("Bad Name", "--candidate", "sdpa", "--prediction", "1"), "line id"),
    ]
    for args, why in cases:
        r = run_bench(repo, "new", *args)
        assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", (args, r.stderr)
    assert sorted(p.name for p in (repo / "registrations").iterdir()) == before
    assert (repo / "registrations" / "tiny.toml").read_text() == tiny


# -- any installed workload (issue 50, item 5) ------------------------------------------------------

# Per workload: the --grid entries that keep its registration quick on a shared CPU (attention's
# and decode's example grids are a GPU's; the others' are small already), and a bar on its own axes.
WORKLOAD_CASES = {
    "attention": (("seq_len=64", "heads=2", "kv_heads=2", "head_dim=16", "dtype=float32"), "seq_len >= 64"),
    "decode": (("seq_len=64", "heads=4", "kv_heads=2", "head_dim=16", "batch=2", "dtype=float32"), "seq_len >= 64"),
    "gemm_bias_gelu": ((), "m >= 1024"),
    "rmsnorm": ((), "tokens >= 4096"),
    "softmax": ((), "cols >= 1024"),
}


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    """The documented softmax package installed for the `bench` subprocesses."""
    from tests.test_workload_api import SOFTMAX_MODULE, softmax_entry_points, softmax_source

    site = installed_dist(tmp_path / "site", "softmax_bench", "0.1", softmax_entry_points(),
                          {SOFTMAX_MODULE: softmax_source()})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO)]))


@pytest.mark.parametrize("workload", sorted(WORKLOAD_CASES))
def test_new_writes_a_registration_of_any_installed_workload_that_registers(repo, plugin_env, tmp_path, workload):
    from harness.registry import get_workload

    grid, where = WORKLOAD_CASES[workload]
    line = f"new-{workload.replace('_', '-')}"
    go = f"geomean(speedup) >= 1.05 and pass_rate == 1.0 and min(speedup where {where}) >= 1.0"
    args = [a for g in grid for a in ("--grid", g)]
    r = run_bench(repo, "new", line, "--workload", workload, *args, "--hypothesis", "faster at the largest size",
                  "--go", go, "--prediction", "1.1")
    assert r.returncode == 0, r.stderr
    text = (repo / "registrations" / f"{line}.toml").read_text()
    raw = tomllib.loads(text)
    if workload == "softmax":  # installed for the subprocesses only: its declaration read from its module
        wl = runpy.run_path(str(tmp_path / "site" / "softmax_bench.py"))["SOFTMAX"]
    else:
        wl = get_workload(workload)
    assert raw["workload"] == workload and list(raw["grid"]) == list(wl.axis_names)
    given = dict(g.split("=") for g in grid)
    for axis in wl.axis_names:  # the example grid under the values given
        if axis not in given:
            assert raw["grid"][axis] == wl.example_grid[axis], axis
    dtypes = raw["grid"]["dtype"]
    assert raw["correctness"]["atol"] == {d: wl.tolerances[d][0] for d in dtypes}
    assert raw["correctness"]["rtol"] == {d: wl.tolerances[d][1] for d in dtypes}
    assert raw["correctness"]["families"] == list(wl.default_families)
    assert raw["baseline"] != raw["candidate"] and raw["bar"]["go"] == go
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", line)
    reg = run_bench(repo, "register", f"registrations/{line}.toml")
    assert reg.returncode == 0, reg.stdout + reg.stderr
    assert f"registered line {line}" in reg.stdout


def test_new_refuses_another_workload_s_axes_and_an_unknown_workload_in_one_line(repo):
    before = sorted(p.name for p in (repo / "registrations").iterdir())
    cases = [
        (("x", "--workload", "nosuch", "--prediction", "1"), "--workload 'nosuch': unknown workload 'nosuch'"),
        (("x", "--workload", "gemm_bias_gelu", "--seq-len", "64", "--prediction", "1"),
         "--seq-len: workload 'gemm_bias_gelu' has no axis seq_len"),
        (("x", "--workload", "rmsnorm", "--causal", "true", "--prediction", "1"),
         "--causal: workload 'rmsnorm' has no axis causal"),
        (("x", "--workload", "gemm_bias_gelu", "--grid", "seq_len=64", "--prediction", "1"),
         "'seq_len' is not an axis of workload 'gemm_bias_gelu'"),
        (("x", "--workload", "gemm_bias_gelu", "--grid", "m=0", "--prediction", "1"), "m = 0: must be > 0"),
        (("x", "--workload", "gemm_bias_gelu", "--grid", "m=big", "--prediction", "1"), "--grid m='big': not an integer"),
        (("x", "--workload", "gemm_bias_gelu", "--grid", "m", "--prediction", "1"), "write AXIS=V1,V2"),
        (("x", "--workload", "gemm_bias_gelu", "--candidate", "sdpa", "--prediction", "1"),
         "kernel 'sdpa' has no workload 'gemm_bias_gelu'"),
    ]
    for args, why in cases:
        r = run_bench(repo, "new", *args)
        assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", (args, r.stderr)
    # A bar on another workload's axis: refused as `bench register` refuses it (its one line,
    # then the expression with a caret under the field, as every bar refusal shows it).
    r = run_bench(repo, "new", "x", "--workload", "gemm_bias_gelu", "--hypothesis", "h", "--go",
                  "min(speedup where seq_len >= 64) >= 1", "--prediction", "1")
    assert r.returncode == 2 and r.stdout == "" and "unknown field 'seq_len'" in r.stderr.splitlines()[0], r.stderr
    assert sorted(p.name for p in (repo / "registrations").iterdir()) == before


def test_a_workload_without_an_example_value_needs_grid_for_that_axis():
    from harness.errors import UserError
    from harness.governance import scaffold
    from harness.workloads.api import Axis, Workload, positive

    class Bare(Workload):
        name = "bare"
        axes = (Axis("rows", int, check=positive), Axis("dtype", str, choices=("float32",)),
                Axis("flag", bool))

    wl = Bare()
    assert scaffold.default_grid(wl) == {"rows": None, "dtype": ["float32"], "flag": [False]}
    with pytest.raises(UserError, match="gives no example value for axis rows: pass --grid rows=V1,V2"):
        scaffold._full_grid(wl, scaffold.GridAsk("bare", {}))
    full = scaffold._full_grid(wl, scaffold.GridAsk("bare", {}, axes=("rows=4,8", "flag=true,false")))
    assert full == {"rows": [4, 8], "dtype": ["float32"], "flag": [True, False]}
    Bare.example_grid = {"rows": [0]}
    with pytest.raises(UserError, match="example_grid 'rows' must be a non-empty list"):
        wl.validate()
