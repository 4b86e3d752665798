"""The anchors' conveniences (issue 51 item 7) on the shipped ledgers, in a scratch clone:
compare's settable q and minimum effect, `--format md` for a pull-request comment, the
config × kernel pivot with the best kernel marked, and JSON from `ledger verify` and `site`.
Each refusal is one line on stderr, exit 2, nothing on stdout and nothing written."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil

import pytest

from tests.conftest import REPO, git, run_bench

LEDGERS = ("flash-h200", "flash-h200-v2", "flash-h200-peers")
BOX = set("─│┃━┏┓┗┛┡┩╇╈╋┼├┤┬┴═║╔╗╚╝")
ANSI = "\x1b["


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    from tests.conftest import TINY, init_repo

    root = init_repo(tmp_path_factory.mktemp("conv") / "proj", {"tiny": TINY})
    for line in (*LEDGERS, "_device_ceilings"):  # the peers' rows name the ceilings row they used
        shutil.copy(REPO / "ledger" / f"{line}.jsonl", root / "ledger" / f"{line}.jsonl")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the shipped flash ledgers")
    return root


def _clean(root) -> None:
    assert git(root, "status", "--porcelain") == ""


def _refused(r, says: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


def _plain_markdown(text: str) -> list[str]:
    """The table lines of a Markdown document, after checking it is plain GitHub-flavoured
    Markdown: no ANSI, no box drawing, a header row and its alignment row."""
    assert ANSI not in text and not BOX & set(text)
    lines = [x for x in text.splitlines() if x.startswith("|")]
    assert re.fullmatch(r"\|(:---|---:)(\|(:---|---:))*\|", lines[1]), lines[1]
    assert all(x.count("|") - x.count("\\|") == lines[0].count("|") for x in lines), lines
    return lines


def test_compare_q_and_min_effect_are_settable_and_the_defaults_unchanged(shipped):
    base = json.loads(run_bench(shipped, "compare", "flash-h200", "flash-h200-v2", "--format", "json").stdout)
    assert base["fdr_q"] == 0.01 and base["min_effect"] == 0.02
    r = run_bench(shipped, "compare", "flash-h200", "flash-h200-v2", "--format", "json", "--q", "0.2",
                  "--min-effect", "0.001")
    assert r.returncode == 0, r.stderr
    loose = json.loads(r.stdout)
    assert loose["fdr_q"] == 0.2 and loose["min_effect"] == 0.001
    # Same tests, same p-values; more of them significant at the looser rate, and the one
    # UNCLEAR config of the default (a change under 2%) named at a 0.1% minimum.
    assert [p["p_adjusted"] for p in loose["pairs"]] == [p["p_adjusted"] for p in base["pairs"]]
    assert loose["significance"]["adjusted"] >= base["significance"]["adjusted"]
    assert base["counts"]["UNCLEAR"] == 1 and loose["counts"]["UNCLEAR"] == 0
    assert loose["counts"]["SLOWER"] == base["counts"]["SLOWER"] + 1
    for p in loose["pairs"]:
        if p["change"] in ("FASTER", "SLOWER"):
            assert p["p_adjusted"] < 0.2 and abs(p["speedup"] - 1) >= 0.001 / 1.001
    table = run_bench(shipped, "compare", "flash-h200", "flash-h200-v2", "--q", "0.2", "--min-effect", "0.005")
    assert table.returncode == 0 and "q = 0.2" in table.stdout and "at least 0.5%" in table.stdout


@pytest.mark.parametrize("args, says", [
    (("--q", "0"), "--q 0.0: give the false-discovery rate as a number between 0 and 1"),
    (("--q", "1"), "--q 1.0:"),
    (("--q", "nan"), "--q nan:"),
    (("--min-effect", "-0.01"), "--min-effect -0.01: give the smallest change worth naming as a fraction"),
    (("--min-effect", "1.5"), "--min-effect 1.5:"),
    (("--min-effect", "inf"), "--min-effect inf:"),
    (("--format", "markdown"), "--format 'markdown': use table, json, csv, md"),
    (("--figure", "ms"), "--figure ms applies to --pivot only"),
    (("--pivot",), "--pivot takes one line"),
    (("--next-run", "--format", "md"), "--next-run has no MD form"),
])
def test_compare_refuses_bad_settings_in_one_line(shipped, args, says):
    _refused(run_bench(shipped, "compare", "flash-h200", "flash-h200-v2", *args), says)
    _clean(shipped)


def test_compare_and_route_as_markdown_for_a_pull_request(shipped, tmp_path):
    md = run_bench(shipped, "compare", "flash-h200", "flash-h200-v2", "--format", "md")
    assert md.returncode == 0, md.stderr
    lines = _plain_markdown(md.stdout)
    assert lines[0] == "| config | candidate | A ms | A MHz | B ms | B MHz | speedup | CI | p adj. | change |"
    assert len(lines) == 2 + 36 and md.stdout.startswith("**flash-h200-v2 against flash-h200")
    assert "Benjamini-Hochberg" in md.stdout and "- flash-h200 and flash-h200-v2 are one amendment chain" in md.stdout
    assert md.stderr == ""  # the notes are the comment's list, not stderr's
    # CI mode: the outcome line closes the comment, and the exit code is JSON's.
    ci = run_bench(shipped, "compare", "--against", "flash-h200", "flash-h200-v2", "--format", "md")
    cj = run_bench(shipped, "compare", "--against", "flash-h200", "flash-h200-v2", "--format", "json")
    assert ci.returncode == cj.returncode == (1 if json.loads(cj.stdout)["regressions"] else 0)
    assert ci.stdout.rstrip().splitlines()[-1].startswith("FAIL: " if ci.returncode else "ok: ")
    route = run_bench(shipped, "route", "flash-h200-v2", "--exact", "--out", str(tmp_path), "--format", "md")
    assert route.returncode == 0, route.stderr
    rows = _plain_markdown(route.stdout)
    assert rows[0].startswith("| shape | candidate | speedup | CI |") and len(rows) == 2 + 12
    assert "wrote" in route.stderr and "wrote" not in route.stdout
    assert (tmp_path / "route.json").exists() and (tmp_path / "route.py").exists()
    _refused(run_bench(shipped, "route", "flash-h200-v2", "--exact", "--out", str(tmp_path / "x"), "--format", "yml"),
             "--format 'yml'")
    assert not (tmp_path / "x").exists()


def _seq(config_key: str) -> int:
    return int(re.search(r"/n(\d+)/", config_key).group(1))


def test_the_pivot_marks_the_best_kernel_per_config_in_numeric_order(shipped):
    r = run_bench(shipped, "compare", "flash-h200-peers", "--pivot", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kernels"] == ["cublas_stack", "triton_flash", "sdpa_cudnn", "fa4"] and doc["figure"] == "speedup"
    rows = doc["rows"]
    assert len(rows) == 16
    seqs = [_seq(x["config"]) for x in rows]
    assert seqs == sorted(seqs) and seqs[0] == 1024 and seqs[-1] == 16384  # as numbers, not text
    ledger = [json.loads(x) for x in (REPO / "ledger" / "flash-h200-peers.jsonl").read_text().splitlines()]
    speedups = {(x["config_key"], x["candidate"]): x["metrics"]["speedup"] for x in ledger if x["kind"] == "result"}
    for row in rows:
        cells = row["cells"]
        assert cells["cublas_stack"]["value"] == 1.0
        above = {k: c["value"] for k, c in cells.items() if c and c["ci_low"] is not None and c["ci_low"] > 1}
        assert row["best"] == max(above, key=above.get)
        assert [k for k, c in cells.items() if c and c["best"]] == [row["best"]]
        for k, c in cells.items():
            if k != "cublas_stack":
                assert c["value"] == speedups[(row["config"], k)]  # the ledger's own figure
                assert c["ci_low"] <= c["value"] <= c["ci_high"]
            if c["tied"]:
                assert c["ci_high"] >= cells[row["best"]]["ci_low"]
    assert sum(doc["wins"].values()) == 16
    text = run_bench(shipped, "compare", "flash-h200-peers", "--pivot")
    assert text.returncode == 0 and "best at: fa4 16" in " ".join(text.stdout.split())
    md = run_bench(shipped, "compare", "flash-h200-peers", "--pivot", "--format", "md")
    lines = _plain_markdown(md.stdout)
    assert lines[0] == "| config | cublas_stack (baseline) | triton_flash | sdpa_cudnn | fa4 |" and len(lines) == 18
    assert all(line.count("**") == 2 for line in lines[2:])  # one best, in bold, per config
    records = list(csv.DictReader(io.StringIO(run_bench(shipped, "compare", "flash-h200-peers", "--pivot",
                                                        "--format", "csv").stdout)))
    assert len(records) == 16 * 4 and sum(x["best"] == "True" for x in records) == 16


def test_the_pivot_of_median_times_marks_the_fastest(shipped):
    r = run_bench(shipped, "compare", "flash-h200-v2", "--pivot", "--figure", "ms", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["figure"] == "ms" and doc["kernels"][0] == "cublas_stack"
    for row in doc["rows"]:
        values = {k: c["value"] for k, c in row["cells"].items() if c is not None}
        assert all(math.isfinite(v) and v > 0 for v in values.values())
        assert row["best"] == min(values, key=values.get)


@pytest.mark.parametrize("args, says", [
    (("flash-h200-peers", "--pivot", "--q", "0.05"), "--pivot tabulates one line and tests nothing: drop --q"),
    (("flash-h200-peers", "--pivot", "--against", "flash-h200-v2"), "drop --against"),
    (("flash-h200-peers", "--pivot", "--figure", "tflops"), "--figure 'tflops': use speedup or ms"),
    (("flash-h200-peers", "flash-h200-v2", "--pivot"), "--pivot takes one line (LINE or LINE@COMMIT), got 2"),
    (("../../evil", "--pivot"), "../../evil"),
    (("tiny", "--pivot"), "no ledger for line 'tiny'"),
])
def test_the_pivot_refuses_in_one_line(shipped, args, says):
    _refused(run_bench(shipped, "compare", *args), says)
    _clean(shipped)


def test_ledger_verify_speaks_json(shipped, tmp_path):
    r = run_bench(shipped, "ledger", "verify", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["gone"] == [] and doc["strict"] is False
    by = {x["line"]: x for x in doc["ledgers"]}
    assert set(by) == {*LEDGERS, None} and by[None]["ledger"] == "_device_ceilings.jsonl"
    v2 = by["flash-h200-v2"]
    n = len((REPO / "ledger" / "flash-h200-v2.jsonl").read_text().splitlines())
    assert v2["ok"] is True and v2["rows"] == n and isinstance(v2["results_recomputed"], int)
    assert v2["results_recomputed"] > 0 and v2["problems"] == [] and v2["bad_row"] is None
    assert json.loads(run_bench(shipped, "ledger", "verify", "flash-h200", "--json").stdout)["ledgers"][0]["line"] \
        == "flash-h200"
    _refused(run_bench(shipped, "ledger", "verify", "--format", "csv"), "--format 'csv': use table, json")
    _refused(run_bench(shipped, "ledger", "verify", "--json", "--format", "table"), "pick one output format")
    # A tampered ledger: ok false, the problem named, exit 1, still one document.
    bad = tmp_path / "bad"
    shutil.copytree(shipped, bad)
    path = bad / "ledger" / "flash-h200.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[3])
    row["seq"] = row["seq"] + 100
    lines[3] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    t = run_bench(bad, "ledger", "verify", "--format", "json")
    assert t.returncode == 1, t.stderr
    doc = json.loads(t.stdout)
    broken = {x["line"]: x for x in doc["ledgers"]}["flash-h200"]
    assert doc["ok"] is False and broken["ok"] is False and broken["problems"] and isinstance(broken["bad_row"], int)


def test_site_speaks_json_and_writes_nothing(shipped):
    r = run_bench(shipped, "site", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    lines = {x["line"]: x for x in doc["lines"]}
    assert set(lines) == set(LEDGERS) and lines["flash-h200-v2"]["outcome"] == "GO"
    head = lines["flash-h200-v2"]["headline"]
    assert head["metric"] == "tflops" and isinstance(head["value"], float) and head["decided"] is True
    (chain,) = doc["chains"]
    assert chain["root"] == "flash-h200" and [s["line"] for s in chain["steps"]][:2] == ["flash-h200", "flash-h200-v2"]
    marks = {s["line"]: s["mark"] for s in chain["steps"]}
    assert marks["flash-h200"] == "FIRST" and marks["flash-h200-peers"] == "NOT COMPARABLE"
    assert not (shipped / "site").exists()
    _clean(shipped)
    _refused(run_bench(shipped, "site", "--format", "json", "--out", "elsewhere"), "drop --out")
    _refused(run_bench(shipped, "site", "--format", "html"), "--format 'html': use files, json")
    assert not (shipped / "elsewhere").exists()
    _clean(shipped)


@pytest.mark.parametrize("columns", [80, 100])
def test_the_pivot_fits_the_terminal_and_never_splits_a_figure(shipped, columns):
    import subprocess
    import sys

    from tests.conftest import bench_env

    r = subprocess.run([sys.executable, "-m", "harness", "compare", "flash-h200-peers", "--pivot"], cwd=shipped,
                       capture_output=True, text=True, env={**bench_env(), "COLUMNS": str(columns)}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert max(map(len, r.stdout.splitlines())) <= columns and "…" not in r.stdout
    doc = json.loads(run_bench(shipped, "compare", "flash-h200-peers", "--pivot", "--format", "json").stdout)
    words = {w.lstrip("*~") for w in r.stdout.split()}  # a mark leads its figure
    for row in doc["rows"]:
        for kernel, c in row["cells"].items():
            if kernel != "cublas_stack":  # each figure and each CI whole on one line
                assert f"{c['value']:.3f}×" in words and f"[{c['ci_low']:.3f}–{c['ci_high']:.3f}]" in words
