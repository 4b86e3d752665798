"""[verify] clauses: the language, the registration table, and the verdict that needs them.

Counters come from the real H200 ncu output in tests/data/ncu/ (fp16 B1 H16 N4096 D128).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.registration import verify
from harness.registration.bar import BarError
from harness.measurement import counters
from harness.commands.profile import formula_values
from harness.workloads import Config, formulas

from conftest import TINY, git, run_bench

DATA = Path(__file__).parent / "data" / "ncu"
CFG = Config("attention", 1, 16, 16, 4096, 128, "float16", False)
ISSUE_CLAUSES = ["dram_read_bytes <= 1.2 * min_bytes", "local_spill_bytes == 0", "tensor_active >= 0.3"]


def env_of(kernel: str) -> dict:
    ls = [x for x in counters.parse_csv((DATA / "raw-base.csv").read_text()) if counters.in_range(x, kernel)]
    return {**formula_values(CFG), **counters.per_call(ls, 1)}


# ----------------------------------------------------------------------------- language


def test_parses_arithmetic_with_precedence_and_parentheses():
    c = verify.parse("dram_read_bytes + 2 * dram_write_bytes <= (min_bytes - 1) / 2")
    env = {"dram_read_bytes": 10.0, "dram_write_bytes": 3.0, "min_bytes": 41.0}
    assert verify.check(c, env) == (16.0, 20.0, True)
    assert verify.names(c) == {"dram_read_bytes", "dram_write_bytes", "min_bytes"}
    # "x -1": the tokenizer reads a signed number; after an operand it is a subtraction.
    assert verify.value(verify.parse("registers -1 >= 0").left, {"registers": 5}) == 4.0
    assert verify.value(verify.parse("-2 * registers < 0").left, {"registers": 5}) == -10.0


@pytest.mark.parametrize("text, message, column", [
    ("dram_reads <= min_bytes", "unknown name 'dram_reads'", 1),
    ("dram_read_bytes <= 1.2 *", "expected a number, a name or '('", 25),
    ("dram_read_bytes 1.2", "expected a comparison", 17),
    ("registers <= 255 and launches == 1", "unexpected 'and'", 18),
    ("(registers <= 255)", "expected ')' to close '('", 12),  # parentheses group arithmetic only
    ("(registers + 1 <= 255", "expected ')'", 16),
    ("geomean(speedup) >= 1", "unknown name 'geomean'", 1),
    ("", "empty clause", 1),
])
def test_malformed_clauses_name_the_column(text, message, column):
    with pytest.raises(BarError) as exc:
        verify.parse(text)
    first = str(exc.value).splitlines()[0]
    assert first.startswith("clause: ") and message in first and f"at column {column}" in first


def test_the_bar_language_still_refuses_arithmetic():
    from harness.registration import bar

    with pytest.raises(BarError, match="unexpected '\\*'"):
        bar.parse("geomean(speedup) >= 1.1 * 2")


def test_clause_lists_are_validated():
    assert len(verify.parse_all(ISSUE_CLAUSES)) == 3
    for bad in ([], "registers == 0", ["registers == 0", "registers == 0"], [3]):
        with pytest.raises(BarError):
            verify.parse_all(bad)


# ----------------------------------------------------------------------------- on real counters


def test_issue_clauses_hold_for_the_fused_kernel_and_catch_the_stack():
    clauses = verify.parse_all(ISSUE_CLAUSES)
    flash, stack = env_of("triton_flash"), env_of("cublas_stack")
    (dram, spill, tensor) = verify.evaluate(clauses, [(CFG.key(), "triton_flash", flash)])
    assert dram.passed is spill.passed is tensor.passed is True
    (dram, spill, tensor) = verify.evaluate(clauses, [(CFG.key(), "triton_flash", flash),
                                                      (CFG.key(), "cublas_stack", stack)])
    assert dram.passed is False and spill.passed is True and tensor.passed is False
    bad = dram.as_row(5)
    assert bad["n"] == 2 and bad["n_failed"] == 1 and bad["failing"][0]["candidate"] == "cublas_stack"
    assert bad["failing"][0]["left"] == pytest.approx(stack["dram_read_bytes"])
    assert bad["failing"][0]["right"] == pytest.approx(1.2 * flash["min_bytes"])


def test_missing_values_make_a_clause_unknown_never_true():
    clauses = verify.parse_all(["tensor_active >= 0.3", "dram_read_bytes / (min_bytes - min_bytes) < 1"])
    env = {**env_of("triton_flash"), "tensor_active": None}
    tensor, ratio = verify.evaluate(clauses, [(CFG.key(), "k", env)])
    assert tensor.passed is None and ratio.passed is None  # a metric ncu did not give; a division by zero
    (none,) = verify.evaluate(clauses[:1], [])
    assert none.passed is None  # nothing profiled: no claim checked
    # One false pair outweighs unknown ones.
    (mixed,) = verify.evaluate(clauses[:1], [("a", "k", {"tensor_active": None}), ("b", "k", {"tensor_active": 0.1})])
    assert mixed.passed is False


# ----------------------------------------------------------------------------- registration


def _with_verify(extra: str) -> str:
    return TINY + "\n" + textwrap.dedent(extra)


def test_registration_reads_and_records_verify(tmp_path):
    from harness.registration import schema as registration

    p = tmp_path / "v.toml"
    p.write_text(_with_verify(f"[verify]\nclauses = {ISSUE_CLAUSES!r}\n".replace("'", '"')))
    reg = registration.load(p)
    assert reg.verify == tuple(ISSUE_CLAUSES) and reg.summary()["verify"] == ISSUE_CLAUSES
    p.write_text(TINY)
    assert registration.load(p).verify == ()


@pytest.mark.parametrize("table, message", [
    ('[verify]\nclauses = ["dram_bytes <= min_bytes"]\n', "[verify] clause: unknown name 'dram_bytes'"),
    ('[verify]\nclause = ["registers <= 255"]\n', "unknown field clause in [verify]"),
    ('[verify]\n', "[verify] needs clauses"),
    ('verify = "registers <= 255"\n', "[verify] must be a table"),
])
def test_bad_verify_is_refused_at_register_time(repo, table, message):
    text = _with_verify(table) if table.startswith("[") else table + TINY
    (repo / "registrations" / "v.toml").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v")
    res = run_bench(repo, "register", "registrations/v.toml")
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert not (repo / "ledger" / "v.jsonl").exists()


def test_profile_needs_a_gpu_and_says_so(repo):
    assert run_bench(repo, "register", "registrations/tiny.toml").returncode == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "registered")
    before = (repo / "ledger" / "tiny.jsonl").read_bytes()
    res = run_bench(repo, "profile", "tiny", "attention/b9/h2/kv2/n32/d16/float32/full")
    assert res.returncode == 2 and "not in line 'tiny'" in res.stderr and len(res.stderr.splitlines()) == 1
    res = run_bench(repo, "profile", "tiny")
    assert res.returncode == 2 and "need an NVIDIA GPU" in res.stderr and len(res.stderr.splitlines()) == 1
    assert (repo / "ledger" / "tiny.jsonl").read_bytes() == before


# ----------------------------------------------------------------------------- verdict


def _line_with_results(repo, clauses, *, profile_with):
    """Register a [verify] line, append real CPU results (run_config, as the sweep does)
    and `profile` rows whose launches are the recorded H200 ones of ``profile_with`` (one
    recorded kernel per config of the line, or None for no profile rows)."""
    from harness.governance.line import open_line, register
    from harness.measurement.profile import ProfileResult
    from harness.commands.sweep import context
    from harness.commands.profile import payload
    from harness.pipeline.run import run_config

    (repo / "registrations" / "v.toml").write_text(_with_verify(f"[verify]\nclauses = {clauses!r}\n".replace("'", '"')))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v")
    register("v", root=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "registered")
    recorded = counters.parse_csv((DATA / "raw-base.csv").read_text())
    env = {"device": "cpu", "gpu": None}
    with open_line("v", root=repo, action="a test") as line:
        stamp = line.stamp(env).fields()
        for i, cfg in enumerate(line.reg.configs):
            for o in run_config(cfg, line.reg.candidates, context(line, "cpu", None)):
                line.ledger.append(o.kind, {**stamp, **o.payload})
            if profile_with is None:
                continue
            # The launches are the recorded ones, filed under the line's candidate and config:
            # the verdict's plumbing is under test here, not the numbers. The reductio is the
            # one of the config they were recorded at, with no L2 allowance.
            ls = [x for x in recorded if counters.in_range(x, profile_with[i])]
            per_call = counters.per_call(ls, 1)
            impossible = counters.counter_impossible(per_call["dram_read_bytes"], formulas.min_read_bytes(CFG), 0)
            res = ProfileResult(cfg, "sdpa", launches=tuple(ls), per_call=per_call, impossible=impossible,
                                output_check={"passed": True}, l2_bytes=0)
            line.ledger.append("profile", {**stamp, **payload(res, "candidate", {"passed": True})})
    git(repo, "add", "-A")  # the verdict decides on committed rows only
    git(repo, "commit", "-q", "-m", "rows")
    return env


def _decide(repo, env):
    from harness.governance.line import open_line
    from harness.commands.verdict import close

    with open_line("v", root=repo, action="a verdict") as line:
        return close(line, env)


def test_verdict_refuses_results_without_counters(repo):
    from harness.ledger.format import read_rows
    from harness.vocab.outcomes import measured_on
    from harness.commands.profile import pending_verify

    env = _line_with_results(repo, ["registers <= 255"], profile_with=None)
    with pytest.raises(UserError, match="no counters from this commit and device"):
        _decide(repo, env)
    # What the sweep's [verify] pass would profile: both results, each with its row's seq.
    rows = read_rows(repo / "ledger" / "v.jsonl")
    results = [r for r in rows if r.kind == "result"]
    todo = pending_verify(rows, measured_on(results[0]))
    assert todo == {(r.config_key, r.candidate): r.seq for r in results} and len(todo) == 2
    assert pending_verify(rows, ("another commit", "cpu", None, None)) == {}


def test_verdict_go_needs_every_verify_clause(repo):
    # Bytes far above the tiny config's min_bytes: a clause that fails, next to two that hold.
    env = _line_with_results(repo, ["registers <= 255", "local_spill_bytes == 0", "dram_read_bytes <= 1.2 * min_bytes"],
                             profile_with=("triton_flash", "triton_flash"))
    v = _decide(repo, env)
    assert v.bar.passed and v.outcome == "NO-GO"
    assert [c.passed for c in v.verify] == [True, True, False]
    row = v.row.verify
    assert row[2]["n"] == 2 and row[2]["n_failed"] == 2 and row[2]["failing"][0]["candidate"] == "sdpa"


def test_verdict_go_when_the_clauses_hold(repo):
    from harness.ledger.format import read_rows
    from harness.vocab.outcomes import measured_on
    from harness.commands.profile import pending_verify

    env = _line_with_results(repo, ["registers <= 255", "tensor_active >= 0.3", "launches == 1"],
                             profile_with=("triton_flash", "triton_flash"))
    rows = read_rows(repo / "ledger" / "v.jsonl")
    assert pending_verify(rows, measured_on(rows[-1])) == {}  # every result has its counters
    v = _decide(repo, env)
    assert v.outcome == "GO" and all(c.passed for c in v.verify)
    # The report shows the counter table and the clauses beside the bar.
    from harness.reporting.analysis import report
    from harness.reporting.render import report as report_out
    from harness.reporting.analysis import lines

    data = report.report_data(lines.load_path(repo / "ledger" / "v.jsonl"))
    text = report_out.markdown(data)
    assert "## Hardware counters (Nsight Compute, one call)" in text and "| sdpa | _attn_fwd | 51.2 | 5.931 | 254 |" in text
    assert "| `launches == 1` | 2 | 0 | pass |" in text and "per call (1 launches)" in text
    page = report_out.html(data, {name: b"" for name, _ in report_out.PLOTS})  # the plots are not under test here
    assert "Hardware counters" in page and "<code>tensor_active &gt;= 0.3</code>" in page


def test_counter_impossible_result_counts_as_failed(repo):
    env = _line_with_results(repo, ["registers <= 255"], profile_with=("hollow_half_kv", "triton_flash"))
    v = _decide(repo, env)
    assert v.outcome == "NO-GO" and v.excluded.get("impossible") == 1 and not v.bar.passed
    assert v.bar.clauses[-1].text == "pass_rate == 1.0" and v.bar.clauses[-1].value == 0.5
    assert v.verify[0].passed is True  # the clause holds; the reads are what fail the pair
