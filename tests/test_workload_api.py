"""The workload API (docs/workloads.md): attention and decode as workload objects over the
code that always implemented them, a user's workload from a `bench.workloads` entry point
(the documented softmax package), and the refusals: one line, exit 2, nothing written."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness import registry
from harness.errors import UserError
from harness.workloads import Config
from harness.workloads.api import Axis
from tests.conftest import REPO, TINY, git, installed_dist

DOC = REPO / "docs" / "workloads.md"
SOFTMAX_MODULE = "softmax_bench"


def softmax_source() -> str:
    """The documented plugin module: the ```python block of docs/workloads.md that defines it."""
    blocks = re.findall(r"^```python[ \t]*\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    found = [b for b in blocks if b.startswith(f'"""{SOFTMAX_MODULE}:')]
    if len(found) != 1:
        raise AssertionError(f"docs/workloads.md has {len(found)} blocks defining {SOFTMAX_MODULE}, not one")
    return found[0]


@pytest.fixture
def softmax(tmp_path, monkeypatch):
    """The documented softmax workload, imported from its file, known to this process's
    registry (its kernels too) for this test only."""
    path = tmp_path / f"{SOFTMAX_MODULE}.py"
    path.write_text(softmax_source())
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    spec = importlib.util.spec_from_file_location(SOFTMAX_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers its kernels in the patched registry
    monkeypatch.setattr(registry, "_WORKLOADS", {**registry.load_workloads(), "softmax": module.SOFTMAX})
    module.SOFTMAX.validate()
    return module.SOFTMAX


def softmax_table(**correctness) -> dict:
    return {"schema": 1, "hypothesis": "the fused row softmax writes its output once", "workload": "softmax",
            "candidate": "softmax_fused", "baseline": "softmax_torch",
            "grid": {"rows": [4], "cols": [64, 256], "dtype": ["float32"]},
            "correctness": {"atol": 1e-6, "rtol": 1e-5, "seeds": [0], **correctness},
            "bar": {"go": "geomean(speedup) >= 1.0 and pass_rate == 1.0", "prediction": 1.1}}


def _reg(table: dict):
    from harness import registration_from_table

    return registration_from_table(table, Path("registrations/softmax.toml"), "0" * 64)


# -- bench's own workloads ---------------------------------------------------------------------

def test_pyproject_declares_the_shipped_workloads_as_the_registry_knows_them():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][registry.WORKLOAD_ENTRY_POINT_GROUP] == dict(registry.SHIPPED_WORKLOAD_ENTRY_POINTS)
    assert list(registry.load_workloads())[:2] == ["attention", "decode"]


def test_config_keys_are_those_the_shipped_ledgers_hold():
    from harness import load_registration, read_rows

    assert Config("attention", 1, 16, 16, 4096, 128, "float16", False).key() == \
        "attention/b1/h16/kv16/n4096/d128/float16/full"
    checked = 0
    for ledger in sorted((REPO / "ledger").glob("*.jsonl")):
        toml = REPO / "registrations" / f"{ledger.stem}.toml"
        if not toml.is_file():
            continue
        keys = {c.key() for c in load_registration(toml).configs}
        held = {r.config_key for r in read_rows(ledger) if getattr(r, "config_key", None)}
        assert held <= keys, (ledger.name, sorted(held - keys)[:3])
        checked += bool(held)
    assert checked, "no shipped ledger holds a config key"


@pytest.mark.parametrize("cfg", [Config("attention", 1, 4, 2, 19, 16, "float32", True),
                                 Config("decode", 2, 4, 1, 40, 16, "bfloat16", False)])
def test_attention_and_decode_delegate_to_the_code_that_implements_them(cfg):
    import torch

    from harness import get_kernel, get_workload
    from harness.measurement.reference import reference
    from harness.workloads import formulas
    from harness.workloads.inputs import boundary_configs, make_inputs

    wl = get_workload(cfg.workload)
    assert wl.config(cfg.as_dict()) == cfg and wl.from_row(cfg.as_dict()) == cfg
    assert (wl.flops(cfg), wl.min_bytes(cfg), wl.min_read_bytes(cfg)) == \
        (formulas.flops(cfg), formulas.min_bytes(cfg), formulas.min_read_bytes(cfg))
    qs, ks, _ = cfg.shapes()
    assert [t.shape_of(cfg) for t in (*wl.inputs(cfg), *wl.outputs(cfg))] == [qs, ks, ks, qs]
    assert wl.boundary_configs(cfg) == boundary_configs(cfg)
    drawn = wl.make_inputs(cfg, 3, "outliers")
    assert all(torch.equal(a, b) for a, b in zip(drawn, make_inputs(cfg, 3, "outliers")))
    (ref,) = wl.reference(cfg, drawn)
    assert torch.equal(ref, reference(*drawn, causal=cfg.causal, scale=cfg.scale))
    # The contract: the harness allocates the output, the kernel writes it, its return is dropped.
    (out,) = wl.allocate_outputs(cfg)
    out.fill_(float("nan"))
    assert wl.call(get_kernel("torch_stack").fn, drawn, (out,), cfg) is None
    tol = {"float32": 1e-5, "bfloat16": 2e-2}[cfg.dtype]
    assert torch.allclose(out.double(), ref, atol=tol, rtol=tol)


def test_decode_refuses_causal_and_attention_its_heads_by_the_same_words():
    from harness import get_workload

    grid = {"batch": [1], "heads": [4], "seq_len": [8], "head_dim": [16], "dtype": ["float32"], "causal": [True]}
    with pytest.raises(UserError, match=r"^\[grid\] causal = true has no meaning for decode"):
        get_workload("decode").expand_grid(grid)
    with pytest.raises(UserError, match=r"^\[grid\] heads 4 is not a multiple of kv_heads 3"):
        get_workload("attention").expand_grid({**grid, "kv_heads": [3]})


# -- a user's workload: the documented softmax ---------------------------------------------------

def test_a_plugin_workload_expands_its_grid_and_keys_its_points(softmax):
    reg = _reg(softmax_table())
    assert [c.key() for c in reg.configs] == ["softmax/rows=4/cols=64/dtype=float32",
                                              "softmax/rows=4/cols=256/dtype=float32"]
    cfg = reg.configs[0]
    assert (cfg.rows, cfg.cols, cfg.dtype) == (4, 64, "float32") and reg.families == ("normal", "large")
    assert softmax.flops(cfg) == 4 * 4 * 64 and softmax.min_bytes(cfg) == 2 * 4 * 64 * 4
    assert softmax.from_row(json.loads(json.dumps(cfg.as_dict()))) == cfg
    with pytest.raises(AttributeError, match="no axis 'seq_len'"):
        cfg.seq_len  # noqa: B018 - the attribute access is the test


def test_a_plugin_workload_s_kernels_pass_its_reference(softmax):
    import torch

    from harness import get_kernel

    cfg = softmax.config({"rows": 3, "cols": 67, "dtype": "float32"})
    for family in softmax.default_families:
        inputs = softmax.make_inputs(cfg, 0, family)
        (ref,) = softmax.reference(cfg, inputs)
        for name in ("softmax_torch", "softmax_fused"):
            (out,) = softmax.allocate_outputs(cfg)
            out.fill_(float("nan"))
            softmax.call(get_kernel(name).fn, inputs, (out,), cfg)
            assert torch.allclose(out.double(), ref, atol=1e-6, rtol=1e-5), (name, family)


def test_a_plugin_workload_s_tolerance_floor_refuses_a_tolerance_below_its_dtype_s_rounding(softmax):
    from harness.governance import power

    ok = _reg(softmax_table())
    assert {f["dtype"]: f["passed"] for f in power.tolerance_floor(ok).values()} == {"float32": True}
    tight = softmax_table(atol=0.0, rtol=1e-6)
    tight["grid"]["dtype"] = ["float16"]
    with pytest.raises(UserError) as exc:
        power.tolerance_floor(_reg(tight))
    msg = str(exc.value)
    assert "below float16's own rounding" in msg and "a probability: 0 <= out <= 1" in msg and "\n" not in msg


def test_a_plugin_workload_s_canaries_refuse_a_loose_tolerance(softmax):
    from harness.governance import power

    report = power.tolerance_power(_reg(softmax_table()))
    assert {c["canary"]: c["rejected"] for c in report["canaries"]} == {"drop_last_col": True, "scale_1pct": True}
    with pytest.raises(UserError, match="cannot fail canary"):
        power.tolerance_power(_reg(softmax_table(atol=0.4, rtol=0.4)))


def test_a_plugin_workload_refuses_an_axis_it_does_not_declare_and_a_bad_value(softmax):
    table = softmax_table()
    table["grid"]["seq_len"] = [8]
    with pytest.raises(UserError, match=r"\[grid\] seq_len: not an axis of workload 'softmax' \(its axes: rows, "
                                        r"cols, dtype\)"):
        _reg(table)
    table = softmax_table()
    table["grid"]["cols"] = [0]
    with pytest.raises(UserError, match=r"\[grid\] cols = 0: must be > 0"):
        _reg(table)
    with pytest.raises(UserError, match=r"^\[grid\] cols = 'x' is not an integer$"):
        softmax.config({"rows": 1, "cols": "x", "dtype": "float32"})
    with pytest.raises(UserError, match=r"^\[grid\] needs 'dtype'"):
        softmax.config({"rows": 1, "cols": 2})
    with pytest.raises(UserError, match=r"^\[grid\] dtype = 'float64': unknown dtype"):
        softmax.config({"rows": 1, "cols": 2, "dtype": "float64"})


def _python(code: str, *paths: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO)])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=paths[0],
                          timeout=600)


def softmax_entry_points() -> str:
    """entry_points.txt as pip writes it from the documented package's pyproject.toml block."""
    blocks = re.findall(r"^```toml[ \t]*\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    project = next(tomllib.loads(b)["project"] for b in blocks if "softmax-bench" in b)
    return "\n".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
                     for group, eps in project["entry-points"].items())


def test_an_installed_package_s_workload_and_kernels_come_from_their_entry_points(tmp_path):
    installed_dist(tmp_path, "softmax_bench", "0.1", softmax_entry_points(), {SOFTMAX_MODULE: softmax_source()})
    code = ("from harness import load_workloads, load_kernels; ks = load_kernels(); "
            "print(sorted(load_workloads()), ks['softmax_fused'].workloads, ks['softmax_fused'].distribution['name'])")
    res = _python(code, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0] == "['attention', 'decode', 'gemm_bias_gelu', 'rmsnorm', 'softmax'] ('softmax',) softmax_bench"


@pytest.mark.parametrize("name, value, message", [
    ("broken", "no_such_module:THING", "workload entry point 'broken' (no_such_module:THING) failed to load"),
    ("broken", "json:dumps", "names a function, not a harness.workloads.api.Workload instance"),
    ("rowwise", f"{SOFTMAX_MODULE}:SOFTMAX", "names workload 'softmax': name the entry point after its workload"),
    ("decode", f"{SOFTMAX_MODULE}:SOFTMAX", "names workload 'softmax'"),
])
def test_a_broken_workload_entry_point_names_itself(tmp_path, name, value, message):
    installed_dist(tmp_path, "brokenwl", "0.1", f"[bench.workloads]\n{name} = {value}\n",
                   {SOFTMAX_MODULE: softmax_source()})
    res = _python("from harness import load_workloads; load_workloads()", tmp_path)
    assert res.returncode != 0 and message in res.stderr, res.stderr


def test_a_checkout_run_without_installed_metadata_finds_the_shipped_workloads(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [])
    eps = registry.workload_entry_points()
    assert [(ep.name, ep.value) for ep in eps] == list(registry.SHIPPED_WORKLOAD_ENTRY_POINTS)
    assert eps[1].load() is registry.load_workloads()["decode"]


@pytest.mark.parametrize("change, message", [
    ({"axes": ()}, "axes must be distinct lower-case names"),
    ({"name": "Soft max"}, "its name must be lower-case letters"),
    ({"tolerances": {"float32": (1e-6, 1e-5)}}, "no default tolerance for dtype float16"),
    ({"default_families": ("adversarial",)}, "default_families must be a non-empty subset"),
    ({"size_axis": "tokens"}, "size_axis 'tokens' is not one of its axes"),
    ({"axes": (Axis("speedup", int), Axis("dtype", str, choices=("float32",)))},
     "axis 'speedup' is a metric or a field every row carries"),
])
def test_a_workload_declaration_is_checked_when_loaded(softmax, change, message):
    bad = type("Bad", (type(softmax),), change)()
    with pytest.raises(UserError, match=re.escape(message)):
        bad.validate()


def test_a_bar_filters_on_its_own_workload_s_axes_and_refuses_another_s(softmax):
    from harness.registration import bar

    fields = bar.workload_fields(softmax)
    parsed = bar.parse('min(speedup where cols >= 256 and dtype == "float32") >= 1', fields)
    rows = [{"workload": "softmax", "rows": 4, "cols": c, "dtype": "float32", "candidate": "softmax_fused",
             "correct": True, "speedup": s} for c, s in ((64, 0.5), (256, 1.5))]
    assert bar.evaluate(parsed, rows).passed  # the cols = 64 row is filtered out
    with pytest.raises(bar.BarError, match=re.escape("unknown field 'seq_len'")):
        bar.parse("min(speedup where seq_len >= 256) >= 1", fields)
    with pytest.raises(UserError, match=re.escape("[bar] go: unknown field 'seq_len'")):
        _reg({**softmax_table(), "bar": {"go": "min(speedup where seq_len >= 256) >= 1", "prediction": 1.1}})
    # A report parses a registered bar without its workload: a shipped workload's axes are known.
    assert bar.parse("min(speedup where m >= 1024 and gelu == 'tanh') >= 1").clauses()


# -- the refusals at `bench register`: one line, exit 2, nothing written --------------------------

REFUSED = [
    (TINY.replace('workload = "attention"', 'workload = "gemm"'),
     "unknown workload 'gemm' (known: attention, decode"),
    (TINY.replace("head_dim = [16]", "head_dim = [16]\nrows = [4]"),
     "[grid] rows: not an axis of workload 'attention'"),
    (TINY.replace('candidate = "sdpa"', 'candidate = "cuda_naive_decode"'),
     "kernel 'cuda_naive_decode' has no workload 'attention' (has decode): name a kernel declared for attention"),
    (TINY.replace('dtype = ["float32"]', 'dtype = ["float16"]').replace("atol = 1e-5", "atol = 0.0")
         .replace("rtol = 1e-4", "rtol = 1e-6"),
     "is below float16's own rounding, so no kernel can pass the gate"),
]


def test_each_workload_refusal_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from harness.cli import main
    from tests.conftest import init_repo

    repo = init_repo(tmp_path / "proj", {f"bad{i}": text for i, (text, _) in enumerate(REFUSED)})
    monkeypatch.chdir(repo)
    before = sorted(p.name for p in (repo / "ledger").iterdir())
    for i, (_, message) in enumerate(REFUSED):
        rc = main(["register", f"bad{i}"])
        err = capsys.readouterr().err
        assert rc == 2 and message in err, (i, rc, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert sorted(p.name for p in (repo / "ledger").iterdir()) == before
    assert git(repo, "status", "--porcelain") == ""


# The documented package's line as a user writes it: small CPU shapes and a short timing policy
# (as tests/conftest.py's TINY line), the bar any honest kernel meets.
SOFTMAX_LINE = "\n".join([
    "schema = 1", 'hypothesis = "the fused row softmax writes its output once"', 'workload = "softmax"',
    'candidate = "softmax_fused"', 'baseline = "softmax_torch"',
    "[grid]", "rows = [4]", "cols = [64, 96]", 'dtype = ["float32"]',
    "[correctness]", "atol = 1e-6", "rtol = 1e-5", "seeds = [0]",
    "[timing]", "warmup_ms = 5", "min_samples = 5", "max_samples = 40", "min_time_ms = 5", "timeout_s = 5",
    "[bar]", 'go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"', "prediction = 1.1", "include_noisy = true", ""])


def test_the_documented_package_installed_runs_end_to_end_register_sweep_verdict_report(tmp_path, softmax, request):
    """Issue 50 item 6: a workload from a separate installed package goes through every stage
    on the CPU, in a repository of its own: registered, swept (gate, timing, every check after
    timing), decided and reported, its rows holding its own grid point's axes."""
    from harness.cli.sweep import EXIT_NOTHING_USABLE
    from harness.ledger.format import read_rows
    from harness.vocab.outcomes import MISSING_KINDS, latest_outcomes
    from tests.conftest import MEASURE_ATTEMPTS, init_repo

    site = installed_dist(tmp_path / "site", "softmax_bench", "0.1", softmax_entry_points(),
                          {SOFTMAX_MODULE: softmax_source()})
    repo = init_repo(tmp_path / "proj", {"softmax": SOFTMAX_LINE})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "COLUMNS": "200",
           "PYTHONUNBUFFERED": "1"}

    def bench(*args):
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, capture_output=True, text=True,
                              env=env, timeout=600)

    listed = bench("kernels")
    assert listed.returncode == 0 and "softmax_fused" in listed.stdout and "softmax_torch" in listed.stdout
    reg = bench("register", "softmax")
    assert reg.returncode == 0, reg.stdout + reg.stderr
    ledger = repo / "ledger" / "softmax.jsonl"
    swept = bench("sweep", "softmax", "--no-ceilings")
    for _ in range(MEASURE_ATTEMPTS):  # a host busy with other tests leaves pairs unmeasured (exit 4): again
        if swept.returncode not in (0, EXIT_NOTHING_USABLE) or \
                not any(o.kind in MISSING_KINDS for o in latest_outcomes(read_rows(ledger)).values()):
            break
        swept = bench("sweep", "softmax", "--no-ceilings", "--remeasure")
    assert swept.returncode == 0, swept.stdout + swept.stderr
    results = [r for r in read_rows(ledger) if r.kind == "result"]
    assert {r.config_key for r in results} == {"softmax/rows=4/cols=64/dtype=float32",
                                               "softmax/rows=4/cols=96/dtype=float32"}
    for r in results:
        assert r.config == {"workload": "softmax", "rows": 4, "cols": r.config["cols"], "dtype": "float32"}
        for gate in r.gate.values():  # per role: the candidate's and the baseline's
            assert gate["passed"] and gate["families"] == ["normal", "large"], gate
            assert gate["boundary_configs"] == [f"softmax/rows=4/cols={n}/dtype=float32" for n in (1, 67)]
        assert r.metrics["tflops"] > 0 and r.metrics["kv_gbps"] is None
    verified = bench("ledger", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "not re-audited" not in verified.stdout  # the plugin is installed: its rows' rates recomputed
    bare = subprocess.run([sys.executable, "-m", "harness", "ledger", "verify"], cwd=repo, capture_output=True,
                          text=True, env={**env, "PYTHONPATH": str(REPO)}, timeout=600)
    assert bare.returncode == 0 and "rates not re-audited: workload 'softmax' is not installed (" \
        in " ".join(bare.stdout.split()), bare.stdout + bare.stderr
    verdict = bench("verdict", "softmax")
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert "GO" in verdict.stdout, verdict.stdout
    report = bench("report", "softmax")
    assert report.returncode == 0, report.stdout + report.stderr
    text = (repo / "reports" / "softmax" / "report.md").read_text()
    assert "softmax/rows=4/cols=64/dtype=float32" in text and "softmax_fused" in text
    _plugin_report_and_route(repo, bench, ledger, tmp_path, request)


def _plugin_report_and_route(repo, bench, ledger, tmp_path, request):
    """Issue 50 item 5 on the plugin's own line: its plots read its size axis (cols) with its
    other axes as panels, its page renders in Chromium, and `bench route` keys the dispatcher
    by its axes and falls back along cols."""
    import runpy

    from harness.reporting.analysis import lines
    from harness.reporting.analysis.panels import panels, size_label, size_of
    from harness.reporting.render import plots, report

    view = lines.load_path(ledger)
    results = [r for r in view.outcomes().values() if r.kind == "result"]
    assert sorted(size_of(r) for r in results) == [64.0, 96.0] and size_label(results) == "cols"
    assert [title for title, _ in panels(results)] == ["float32"]  # rows and dtype do not vary: one panel
    for fig in (plots.speedup_figure(results), plots.rates_figure(results, "gbps")):
        assert fig.axes[0].get_xlabel() == "cols (log2 axis)"
        assert sorted(t.get_text() for t in fig.axes[0].get_xticklabels()) == ["64", "96"]
    paths = report.write(view, tmp_path / "report")
    page = request.getfixturevalue("browser").new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(paths["html"].as_uri())
    page.wait_for_load_state("load")
    imgs = page.eval_on_selector_all("img", "els => els.map(e => ({w: e.naturalWidth, ok: e.complete}))")
    assert imgs and all(i["ok"] and i["w"] > 300 for i in imgs), imgs
    page.locator("details.per-config summary").click()
    assert "cols=64" in page.content() and "cols=96" in page.content()
    assert not errors, errors
    page.close()

    routed = bench("route", "softmax", "--out", "routes")
    assert routed.returncode == 0, routed.stdout + routed.stderr
    assert "choose(workload, rows, cols, dtype)" in routed.stdout
    doc = json.loads((repo / "routes" / "route.json").read_text())
    assert {r["config_key"] for r in doc["routes"]} == {"softmax/rows=4/cols=64/dtype=float32",
                                                        "softmax/rows=4/cols=96/dtype=float32"}
    dispatch = runpy.run_path(str(repo / "routes" / "route.py"))
    assert dispatch["FIELDS"] == ("workload", "rows", "cols", "dtype")
    for cols in (64, 96):
        assert dispatch["choose"]("softmax", 4, cols, "float32") == dispatch["ROUTES"][("softmax", 4, cols,
                                                                                      "float32")]
    # An unseen size takes the nearest measured cols' route; another rows or dtype, the baseline.
    assert dispatch["choose"]("softmax", 4, 70, "float32") == dispatch["choose"]("softmax", 4, 64, "float32")
    assert dispatch["choose"]("softmax", 8, 64, "float32") == dispatch["BASELINE"] == "softmax_torch"


# -- hollow kernels, for every workload: each rejected for its own reason -------------------------

def _attention_correct(q, k, v, out, *, causal, scale):
    """Attention's and decode's float64 reference, rounded into out: a correct kernel."""
    from harness.measurement.reference import reference

    out.copy_(reference(q, k, v, causal=causal, scale=scale))


def _softmax_correct(x, out):
    import torch

    out.copy_(torch.softmax(x.to(torch.float64), dim=-1))


def _workload_case(name: str, request):
    """(workload, a small float32 config of it, a correct kernel of its call contract)."""
    if name == "softmax":
        wl = request.getfixturevalue("softmax")
        return wl, wl.config({"rows": 4, "cols": 64, "dtype": "float32"}), _softmax_correct
    if name in SHIPPED_TORCH:  # the other shipped workloads: their torch baselines
        wl = registry.get_workload(name.removesuffix("_residual"))
        return wl, wl.config(SHIPPED_TORCH[name][1]), registry.get_kernel(SHIPPED_TORCH[name][0]).fn
    return registry.get_workload(name), Config(name, 1, 2, 2, 32, 16, "float32", False), _attention_correct


# Small float32 points of the other shipped workloads, with the torch baseline that computes them.
SHIPPED_TORCH = {
    "gemm_bias_gelu": ("gemm_torch", {"m": 8, "n": 16, "k": 32, "dtype": "float32", "gelu": "exact"}),
    "rmsnorm": ("rmsnorm_torch", {"tokens": 4, "hidden": 64, "dtype": "float32", "residual": False}),
    # Two outputs: out and residual_out (the fused add-RMSNorm).
    "rmsnorm_residual": ("rmsnorm_torch", {"tokens": 4, "hidden": 64, "dtype": "float32", "residual": True}),
}


def _hollow(kind: str, correct, n_inputs: int):
    """A kernel of the same call contract as ``correct`` that is hollow in one way: ``noop``
    writes nothing, ``skip_part`` leaves its last output's last element unwritten (every other
    element of every output right), ``remembers`` answers every call of a shape with that
    shape's first answer, ``remembers_pointer`` every call on the same input buffer with that
    buffer's first answer."""
    import torch

    kept: dict = {}

    def kernel(*args, **kw):
        inputs, outs = args[:n_inputs], args[n_inputs:]
        if kind == "noop":
            return
        if kind == "skip_part":
            full = tuple(torch.empty_like(o) for o in outs)
            correct(*inputs, *full, **kw)
            for o, f in zip(outs[:-1], full):
                o.copy_(f)
            outs[-1].view(-1)[:-1].copy_(full[-1].view(-1)[:-1])
            return
        key = tuple(outs[0].shape) if kind == "remembers" else inputs[0].data_ptr()
        if key not in kept:
            correct(*inputs, *outs, **kw)
            kept[key] = tuple(o.clone() for o in outs)
        for o, k in zip(outs, kept[key]):
            o.copy_(k)

    kernel.__name__ = f"{kind}_kernel"
    return kernel


@pytest.mark.parametrize("name", ["attention", "decode", "gemm_bias_gelu", "rmsnorm", "rmsnorm_residual", "softmax"])
def test_hollow_kernels_of_every_workload_are_rejected_each_for_its_own_reason(name, request):
    """Issue 50 item 2: the gate and the recheck after timing judge any workload's kernel
    through its workload (draws, call, reference), of one output or several: a no-op kernel
    leaves the poison everywhere, one that skips part of its output leaves it in that part,
    one that remembers answers by shape repeats an earlier seed's output, one that remembers
    by input address answers the old content after the inputs are rewritten in place. Where
    the call has several outputs, each reason names the output it is about."""
    import torch

    from harness.measurement.correctness.after_timing import recheck_in_place
    from harness.measurement.correctness.gate import gate
    from harness.measurement.correctness.results import InputCase, Tolerance

    wl, cfg, correct = _workload_case(name, request)
    outputs = wl.outputs(cfg)
    n_in, n_out, n_last = len(wl.inputs(cfg)), math.prod(outputs[0].shape_of(cfg)), math.prod(outputs[-1].shape_of(cfg))
    several = len(outputs) > 1
    first, last = (f"elements of {outputs[0].name}", f"elements of {outputs[-1].name}") if several else \
        ("output elements", "output elements")
    atol, rtol = wl.tolerances["float32"]

    def gated(fn):
        return gate(fn, cfg, workload=wl, seeds=(0, 1), families=("normal",), atol=atol, rtol=rtol)

    ok = gated(correct)
    assert ok.passed, ok.reason
    noop = gated(_hollow("noop", correct, n_in))
    assert not noop.passed and noop.tag == "unwritten", noop.reason
    assert noop.reason.startswith("seed 0 family normal: ") and \
        f"{n_out} of {n_out} {first} still hold the NaN poison" in noop.reason, noop.reason
    part = gated(_hollow("skip_part", correct, n_in))
    assert not part.passed and part.tag == "unwritten", part.reason
    assert f"1 of {n_last} {last} still hold the NaN poison" in part.reason, part.reason
    same = gated(_hollow("remembers", correct, n_in))
    assert not same.passed and same.tag == "degenerate", same.reason
    assert same.reason.startswith(f"seed 1 family normal: {outputs[0].name if several else 'output'} is "
                                  "bit-identical to seed 0 family normal's although the inputs changed"), same.reason
    # By address: the timed buffers keep their addresses, their content rewritten in place.
    by_ptr = _hollow("remembers_pointer", correct, n_in)
    inputs = tuple(wl.make_inputs(cfg, 5, wl.timing_family))
    outs = wl.allocate_outputs(cfg)
    wl.call(by_ptr, inputs, outs, cfg)  # the timed calls
    rep = recheck_in_place(by_ptr, cfg, inputs, outs, workload=wl, case=InputCase(1000, wl.timing_family),
                           tol=Tolerance(atol, rtol))
    assert not rep.passed and rep.tag == "stale_mismatch", rep.reason
    assert "bit-identical to the one" in rep.reason and "before the inputs were rewritten in place" in rep.reason, \
        rep.reason
    fresh = tuple(torch.empty_like(o) for o in outs)
    rep = recheck_in_place(correct, cfg, inputs, fresh, workload=wl, case=InputCase(1001, wl.timing_family),
                           tol=Tolerance(atol, rtol))
    assert rep.passed, rep.reason
