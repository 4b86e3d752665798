"""`--format json|csv` on the read commands: one document on stdout that parses, the same
figures the table shows, notes on stderr, bad formats refused in one line."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, git, run_bench

LEDGERS = ("flash-h200", "flash-h200-v2")


@pytest.fixture
def shipped(repo):
    for line in LEDGERS:
        shutil.copy(REPO / "ledger" / f"{line}.jsonl", repo / "ledger" / f"{line}.jsonl")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the shipped flash ledgers")
    return repo


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_status_and_kernels_as_json_and_csv(shipped):
    st = run_bench(shipped, "status", "--format", "json")
    assert st.returncode == 0, st.stderr
    lines = {r["line"]: r for r in json.loads(st.stdout)}
    assert set(lines) == set(LEDGERS) and lines["flash-h200-v2"]["outcome"] == "GO"
    assert lines["flash-h200-v2"]["n_done"] == lines["flash-h200-v2"]["n_pairs"] == 36
    assert "amended by flash-h200-v2" in lines["flash-h200"]["history"]
    st_csv = _csv(run_bench(shipped, "status", "--format", "csv").stdout)
    assert {r["line"] for r in st_csv} == set(lines) and {r["outcome"] for r in st_csv} >= {"GO"}
    k = json.loads(run_bench(shipped, "kernels", "--format", "json").stdout)
    names = {x["name"]: x for x in k["kernels"]}
    assert k["device"] == "cpu" and names["torch_stack"]["usable_here"] and not names["cublas_stack"]["usable_here"]
    assert names["cublas_stack"]["why_not"] and "attention" in names["sdpa"]["workloads"]
    kc = _csv(run_bench(shipped, "kernels", "--format", "csv").stdout)
    assert {r["name"] for r in kc} == set(names)


def test_compare_and_route_as_json_and_csv(shipped, tmp_path):
    c = run_bench(shipped, "compare", "flash-h200", "flash-h200-v2", "--format", "json")
    assert c.returncode == 0, c.stderr
    doc = json.loads(c.stdout)
    assert doc["a"] == "flash-h200" and doc["b"] == "flash-h200-v2" and len(doc["pairs"]) == 36
    assert sum(doc["counts"].values()) == 36 and doc["significance"]["tests"] == 36
    assert doc["significance"]["adjusted"] <= doc["significance"]["raw"]
    assert all(p["p_adjusted"] >= p["p_value"] for p in doc["pairs"])
    rows = _csv(run_bench(shipped, "compare", "flash-h200", "flash-h200-v2", "--format", "csv").stdout)
    assert len(rows) == 36 and {"config", "candidate_a", "speedup", "p_adjusted", "change"} <= set(rows[0])
    r = run_bench(shipped, "route", "flash-h200-v2", "--out", str(tmp_path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads((tmp_path / "route.json").read_text())
    assert "wrote" in r.stderr and "wrote" not in r.stdout
    rc = _csv(run_bench(shipped, "route", "flash-h200-v2", "--out", str(tmp_path), "--format", "csv").stdout)
    assert len(rc) == 12 and all(x["candidate"] for x in rc)


def test_ledger_show_speaks_json_and_csv_and_bad_formats_are_refused(shipped):
    j = run_bench(shipped, "ledger", "show", "flash-h200-v2", "--format", "json")
    assert j.returncode == 0, j.stderr
    rows = [json.loads(x) for x in j.stdout.splitlines()]
    assert rows[0]["kind"] == "registered" and len(rows) == len((REPO / "ledger" / "flash-h200-v2.jsonl")
                                                                 .read_text().splitlines())
    tidy = _csv(run_bench(shipped, "ledger", "show", "flash-h200-v2", "--format", "tidy").stdout)
    assert "candidate" in tidy[0] and "kernel" not in tidy[0]
    for args in (("status",), ("kernels",), ("compare", "flash-h200", "flash-h200-v2"), ("route", "flash-h200-v2"),
                 ("ledger", "show", "flash-h200-v2"), ("verdict", "flash-h200-v2")):
        bad = run_bench(shipped, *args, "--format", "yaml")
        assert bad.returncode == 2 and "--format 'yaml'" in bad.stderr and bad.stdout == "", (args, bad.stderr)


BOX = set("─│┃━┏┓┗┛┡┩╇╈╋┼├┤┬┴═║╔╗╚╝")


@pytest.mark.parametrize("columns", [80, 100])
def test_tables_fit_the_terminal_never_split_a_config_field_and_pipe_plain(shipped, tmp_path, columns):
    from harness.workloads.keys import shorten
    from tests.conftest import bench_env

    env = {**bench_env(), "COLUMNS": str(columns)}

    def bench(*args):
        r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=shipped, capture_output=True, text=True,
                           env=env, timeout=300)
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    keys = [json.loads(x)["config_key"] for x in (REPO / "ledger" / "flash-h200-v2.jsonl").read_text().splitlines()
            if "config_key" in json.loads(x)]
    short = set(shorten(keys)[0].values())
    assert "n4096 float16 full" in short
    for args in (("compare", "flash-h200", "flash-h200-v2"), ("route", "flash-h200-v2", "--out", str(tmp_path)),
                 ("ledger", "show", "flash-h200-v2"), ("status",), ("kernels",)):
        out = bench(*args)
        # Wider than the terminal only where a line is one token no wrap at spaces could shorten
        # (a path the terminal itself must wrap).
        wide = [line for line in out.splitlines() if len(line) > columns and len(line.split()) > 1]
        assert not wide, (args, wide)
        assert not BOX & set(out), args  # piped: plain columns, no box drawing
        if args[0] in ("compare", "ledger"):
            assert all(k in out for k in short), args  # each key whole on one line
