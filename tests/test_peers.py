"""A candidate against a peer candidate (``speedup vs "P"``) and a grid at fixed B·N (``tokens``):
the grammar, the registration's rules, and a real sweep decided and reported on them."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest

from harness.errors import UserError
from harness.registration import schema as registration
from harness.registration.bar import parse, parse_aggregate
from tests.conftest import TINY


def _load(tmp_path, text, name="line.toml"):
    p = tmp_path / name
    p.write_text(text)
    return registration.load(p)


def _peer_line(go: str, schema: int = 5, candidates: str = '["sdpa", "sdpa_math"]') -> str:
    return (TINY.replace("schema = 1", f"schema = {schema}").replace('candidate = "sdpa"', f"candidates = {candidates}")
            .replace('go = "geomean(speedup) >= 0.01 and pass_rate == 1.0"', f"go = '''{go}'''"))


# ---------------------------------------------------------------- the grammar


def test_a_peer_clause_parses_with_its_peer_and_exact_text():
    text = 'min(speedup vs "sdpa_cudnn" where candidate == "triton_flash" and seq_len >= 4096) >= 1.0'
    (clause,) = parse(text).clauses()
    agg = clause.aggregate
    assert (agg.func, agg.metric, agg.peer, clause.op, clause.threshold) == ("min", "speedup", "sdpa_cudnn", ">=", 1.0)
    assert clause.text == text
    assert parse_aggregate('geomean(speedup vs "fa4")').peer == "fa4"
    assert parse_aggregate("geomean(speedup)").peer is None


@pytest.mark.parametrize("expr, message", [
    ('min(tflops vs "fa4") >= 1', "'vs' compares speedup with a peer candidate, not tflops"),
    ('count(vs "fa4") >= 1', "'vs' needs the metric it compares before it"),
    ('pass_rate(where candidate == "a") vs "b" == 1', "expected a comparison"),
    ("min(speedup vs fa4) >= 1", "expected a candidate's name in quotes after 'vs'"),
    ('min(speedup vs "") >= 1', "expected a candidate's name in quotes after 'vs'"),
    ('min(speedup vs "fa4" vs "x") >= 1', "expected '\\)'"),
    ("min(speedup where vs == 1) >= 1", "expected a filter field"),
])
def test_a_malformed_peer_clause_is_refused_where_it_goes_wrong(expr, message):
    with pytest.raises(UserError, match=message) as err:
        parse(expr)
    assert "column" in str(err.value)


# ---------------------------------------------------------------- the registration


def test_a_peer_must_be_a_candidate_and_the_file_must_say_schema_5(tmp_path):
    ok = _load(tmp_path, _peer_line('min(speedup vs "sdpa_math" where candidate == "sdpa") >= 0.5'))
    assert ok.bar.clauses()[0].aggregate.peer == "sdpa_math"
    with pytest.raises(UserError, match=r'\[bar\] go: .speedup vs "sdpa_efficient". names no candidate of this '
                                        r"line \(candidates: sdpa, sdpa_math\)"):
        _load(tmp_path, _peer_line('min(speedup vs "sdpa_efficient") >= 0.5'), "other.toml")
    with pytest.raises(UserError, match="names the baseline: .* write plain speedup"):
        _load(tmp_path, _peer_line('min(speedup vs "torch_stack") >= 0.5'), "base.toml")
    with pytest.raises(UserError, match="needs schema = 5"):
        _load(tmp_path, _peer_line('min(speedup vs "sdpa_math") >= 0.5', schema=4), "old.toml")
    text = _peer_line("pass_rate == 1.0") + 'primary = \'geomean(speedup vs "nope")\'\n'
    with pytest.raises(UserError, match=r"\[bar\] primary: .* names no candidate"):
        _load(tmp_path, text, "primary.toml")


def test_bench_register_refuses_a_peer_that_is_not_a_candidate_in_one_line_and_writes_nothing(tmp_path):
    from tests.conftest import init_repo, run_bench

    bad = _peer_line('min(speedup vs "sdpa_flash" where candidate == "sdpa") >= 0.5 and pass_rate == 1.0')
    good = _peer_line('min(speedup vs "sdpa_math" where candidate == "sdpa") >= 0.5 and pass_rate == 1.0')
    repo = init_repo(tmp_path / "proj", {"bad": bad, "good": good})
    r = run_bench(repo, "register", "bad")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "names no candidate of this line" in r.stderr and "add it to candidates or fix the name" in r.stderr
    assert not (repo / "ledger" / "bad.jsonl").exists()
    assert run_bench(repo, "register", "good").returncode == 0 and (repo / "ledger" / "good.jsonl").exists()


def test_a_peer_clause_that_cannot_decide_is_refused_like_any_other(tmp_path):
    from harness.governance.reductio import at_register

    # A candidate against itself is exactly 1: a bar that needs it at 2 is never GO.
    never = _load(tmp_path, _peer_line('min(speedup vs "sdpa" where candidate == "sdpa") >= 2 and pass_rate == 1.0'))
    with pytest.raises(UserError, match="can never be GO"):
        at_register(tmp_path, never)
    # Against another candidate it is any positive ratio: a threshold cuts it, the bar decides.
    fine = _load(tmp_path, _peer_line('min(speedup vs "sdpa_math" where candidate == "sdpa") >= 1 and pass_rate == 1.0'),
                 "fine.toml")
    assert at_register(tmp_path, fine)["waived"] == []


def test_tokens_fixes_batch_times_seq_len_across_the_grid(tmp_path):
    text = TINY.replace("schema = 1", "schema = 5").replace("batch = [1]", "tokens = [96]").replace(
        "seq_len = [32, 48]", "seq_len = [32, 48, 96]")
    reg = _load(tmp_path, text)
    assert [(c.batch, c.seq_len) for c in reg.configs] == [(3, 32), (2, 48), (1, 96)]
    assert reg.summary()["grid"]["tokens"] == [96] and "batch" not in reg.summary()["grid"]
    for edit, message in (
            (text.replace("tokens = [96]", "tokens = [100]"), "tokens 100 is not a multiple of seq_len 32"),
            (text.replace("tokens = [96]", "tokens = [96]\nbatch = [1]"), "needs 'batch' or 'tokens'.*not both"),
            (text.replace("tokens = [96]\n", ""), "needs 'batch' or 'tokens'.*neither"),
            (text.replace("schema = 5", "schema = 4"), r"\[grid\] tokens needs schema = 5")):
        with pytest.raises(UserError, match=message):
            _load(tmp_path, edit, "bad.toml")


# ---------------------------------------------------------------- a real sweep, decided and reported

HOLLOW = '''\
from harness import kernel
from tests import zoo

kernel("softmax_omitted", workloads=("attention",), dtypes=("float32",), devices=("cpu",))(zoo.softmax_omitted)
'''


@pytest.mark.slow
def test_a_peer_clause_is_decided_from_the_rows_own_rounds_and_fails_closed_without_its_peer(tmp_path):
    from harness.ledger.format import read_rows
    from harness.governance.peers import same_measurement
    from tests.conftest import bench_env, init_repo, installed_dist

    go = ('min(speedup vs "sdpa_math" where candidate == "sdpa") >= 0.01 '
          'and min(speedup vs "softmax_omitted" where candidate == "sdpa") >= 0.01 '
          'and pass_rate(where candidate == "sdpa") == 1.0')
    text = (_peer_line(go, candidates='["sdpa", "sdpa_math", "softmax_omitted"]')
            .replace("batch = [1]", "tokens = [64]").replace("seq_len = [32, 48]", "seq_len = [32, 64]")
            + 'primary = \'geomean(speedup vs "sdpa_math" where candidate == "sdpa")\'\n')
    repo = init_repo(tmp_path / "proj", {"peers": text})
    plugin = installed_dist(tmp_path / "site", "hollow", "0.1", "[bench.kernels]\nhollow = hollow_kernels\n",
                            {"hollow_kernels": HOLLOW})
    env = {**bench_env(), "PYTHONPATH": os.pathsep.join([str(plugin), bench_env()["PYTHONPATH"]]),
           "CUDA_VISIBLE_DEVICES": ""}

    def bench(*args, rc=0):
        r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, capture_output=True, text=True,
                           env=env, timeout=900)
        assert r.returncode == rc, r.stderr + r.stdout
        return r.stdout

    bench("register", "peers")
    bench("sweep", "peers", "--no-ceilings")
    rows = [r for r in read_rows(repo / "ledger" / "peers.jsonl") if r.kind in ("result", "incorrect")]
    got = {(r.config["batch"], r.candidate): r for r in rows}
    assert {k: r.kind for k, r in got.items()} == {
        (2, "sdpa"): "result", (2, "sdpa_math"): "result", (2, "softmax_omitted"): "incorrect",
        (1, "sdpa"): "result", (1, "sdpa_math"): "result", (1, "softmax_omitted"): "incorrect"}

    # What the clause must read: at each config, sdpa_math's kept median over sdpa's, both
    # taken from sdpa's own row (the same interleaved rounds), computed here from the samples.
    def arm(row, kernel):
        return statistics.median(row.timing["arms"][f"candidate:{kernel}"]["samples_ms"])

    ratios = [arm(got[(b, "sdpa")], "sdpa_math") / arm(got[(b, "sdpa")], "sdpa") for b in (2, 1)]
    assert all(same_measurement(got[(b, "sdpa")], got[(b, "sdpa_math")]) for b in (2, 1))
    assert not same_measurement(got[(2, "sdpa")], got[(1, "sdpa_math")])

    out = bench("verdict", "peers", "--no-commit", rc=1)  # NO-GO
    first, second = [ln for ln in out.splitlines() if 'speedup vs "' in ln and "→" in ln]
    assert f"→ {min(ratios):.4g} over 2 rows" in first and "pass" in first
    # The hollow peer failed its gate: nothing to compare sdpa with, so the clause is unknown.
    assert "→ — over 2 rows" in second and "fail" in second
    hollow = [r for r in rows if r.candidate == "softmax_omitted"]
    assert (f"2 of its correct rows could not be compared with softmax_omitted (softmax_omitted is incorrect at "
            f"{hollow[0].config_key} (row {hollow[0].seq}); softmax_omitted is incorrect at {hollow[1].config_key} "
            f"(row {hollow[1].seq})): the comparison the bar registered was not made there") in " ".join(out.split())
    assert "NO-GO" in out
    geo = statistics.geometric_mean(ratios)
    assert f"= {geo:.4g}, predicted 1.5" in out

    bench("report", "peers", "--out", str(tmp_path / "rep"))
    md = (tmp_path / "rep" / "report.md").read_text()
    (peer_row,) = [ln for ln in md.splitlines() if ln.startswith('| `min(speedup vs "sdpa_math"')]
    cells = [c.strip() for c in peer_row.split("|")]
    assert cells[2] == f"{min(ratios):.4g}" and cells[6].startswith("[") and cells[8] == "pass"
    assert "vs sdpa_math" in cells[9] and "interleaved" in cells[9]  # the two medians it came from
    (hollow_row,) = [ln for ln in md.splitlines() if ln.startswith('| `min(speedup vs "softmax_omitted"')]
    assert "unknown (not compared)" in hollow_row and "softmax_omitted is incorrect at" in hollow_row
    # Shape by shape against each peer: the value at each config (the clause's min is one of
    # them), with its CI and the two medians; where the peer failed, why.
    table = md.split("Against `sdpa_math`, shape by shape", 1)[1].split("\n\n", 2)[1].splitlines()[2:]
    assert sorted(float(ln.split("|")[3]) for ln in table) == sorted(float(f"{x:.4g}") for x in ratios)
    assert all(ln.split("|")[4].strip().startswith("[") and " vs " in ln.split("|")[5] for ln in table)
    hollow_table = md.split("Against `softmax_omitted`, shape by shape", 1)[1].split("\n\n", 2)[1]
    assert "not compared because" in hollow_table and hollow_table.count("softmax_omitted is incorrect at") == 2

    # A count against that peer is unknown too (it must not pass on zero comparisons).
    from harness.registration import bar as barlang
    from harness.vocab.outcomes import latest_outcomes
    from harness.governance.verdict import bar_rows

    bar_view, _ = bar_rows(latest_outcomes(read_rows(repo / "ledger" / "peers.jsonl")), include_noisy=True)
    for expr in ('count(speedup vs "softmax_omitted" where candidate == "sdpa") < 1',
                 'not count(speedup vs "softmax_omitted" where candidate == "sdpa") >= 1'):
        assert not barlang.evaluate(parse(expr), bar_view).passed, expr
    assert barlang.evaluate(parse('count(speedup vs "sdpa_math" where candidate == "sdpa") == 2'), bar_view).passed

    # P measured again in another run, as a partial re-measure leaves it: its pair at one config
    # is made a memory skip (measured at the same place), and `--remeasure` runs it alone.
    # sdpa's row there still holds the old sdpa_math samples: the verdict refuses to compare.
    from harness.ledger.store import Ledger

    last = got[(2, "sdpa_math")]
    keep = ("commit", "registration_sha256", "registration_commit", "harness_version", "code", "env", "config",
            "config_key", "candidate", "baseline")
    Ledger(repo, "peers").append("skipped", {**{k: getattr(last, k) for k in keep}, "predicted_bytes": 2,
                                             "available_bytes": 1, "reason": "predicted peak > available"})
    subprocess.run(["git", "commit", "-qam", "sdpa_math skipped at one config"], cwd=repo, check=True)
    again = bench("sweep", "peers", "--no-ceilings", "--remeasure")
    assert "1 config" in again or "re-measured" in again, again
    latest = {(r.config_key, r.candidate): r for r in read_rows(repo / "ledger" / "peers.jsonl")
              if r.kind in ("result", "skipped")}
    assert latest[(last.config_key, "sdpa_math")].kind == "result"
    ledger_before = (repo / "ledger" / "peers.jsonl").read_bytes()
    head_before = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    for dry in (("--no-commit",), ()):  # refused alike whether it would write or not
        r = subprocess.run([sys.executable, "-m", "harness", "verdict", "peers", *dry], cwd=repo,
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 2 and "a peer clause compares results of two runs" in r.stderr, r.stderr + r.stdout
        assert "sweep the line at a new commit" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert (repo / "ledger" / "peers.jsonl").read_bytes() == ledger_before  # nothing written
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout == head_before

    # Batch follows seq_len in a grid given in tokens: one panel along seq_len, not one per batch.
    from harness.reporting.analysis.panels import panels

    (title, members), = panels([r for r in rows if r.kind == "result"])
    assert title == "float32, non-causal, d16, b·seq_len = 64" and len(members) == 4
