"""The bar language: what it accepts, what it refuses (and where), and how it evaluates."""

import pytest

from harness.errors import UserError
from harness.registration.bar import BarError, evaluate, evaluate_aggregate, parse, parse_aggregate
from harness.registration.bar_syntax import AGGREGATES, FILTER_FIELDS, METRICS, MAX_NESTING

EXAMPLE = "geomean(speedup) >= 1.10 and min(speedup where seq_len >= 2048) >= 0.98 and pass_rate == 1.0"


def row(seq_len=1024, speedup=1.2, correct=True, dtype="bfloat16", causal=False,
        candidate="fused", **metrics):
    """One ledger row; incorrect rows carry no speedup, as the harness records them."""
    return {
        "workload": "attention", "batch": 4, "heads": 16, "kv_heads": 16,
        "seq_len": seq_len, "head_dim": 128, "dtype": dtype, "causal": causal,
        "candidate": candidate, "correct": correct,
        "speedup": speedup if correct else None, **metrics,
    }


# ---------------------------------------------------------------- accept


def test_constants():
    assert "speedup" in METRICS and "kv_gbps_frac" in METRICS
    assert FILTER_FIELDS["seq_len"] is int and FILTER_FIELDS["dtype"] is str
    assert FILTER_FIELDS["causal"] is bool
    assert set(AGGREGATES) == {"geomean", "min", "max", "median", "mean", "count", "pass_rate"}
    assert issubclass(BarError, UserError)


def test_example_parses_into_three_clauses_with_exact_text():
    bar = parse(EXAMPLE)
    assert bar.expr == EXAMPLE
    assert [c.text for c in bar.clauses()] == [
        "geomean(speedup) >= 1.10",
        "min(speedup where seq_len >= 2048) >= 0.98",
        "pass_rate == 1.0",
    ]
    first, second, third = bar.clauses()
    assert (first.aggregate.func, first.aggregate.metric, first.op, first.threshold) == (
        "geomean", "speedup", ">=", 1.10)
    assert second.aggregate.where.field == "seq_len" and second.aggregate.where.value == 2048
    assert third.aggregate.func == "pass_rate" and third.aggregate.metric is None


@pytest.mark.parametrize("expr", [
    "geomean(speedup) > 1 or not (pass_rate < 0.5)",
    "(geomean(speedup) > 1 or max(tflops) > 100) and not median(ms) > 3",
    "pass_rate(where dtype == \"bfloat16\") == 1",
    "pass_rate(where dtype == 'float16' and not causal) >= 0.9",
    "count(speedup where causal == true) >= 4",
    "count(where causal == false) == 12",
    "count > 0",
    "count() > 0",
    "pass_rate() == 1",
    "mean(speedup_ci_low where workload != \"decode\" or (batch <= 2 and heads > 8)) > 1",
    "min(kv_gbps_frac where seq_len >= 1e3) >= 5.0E-1",
    "max(control) <= 1.05e+0 and min(gbps_frac) > .25",
    "min(speedup where dtype in [\"bfloat16\", \"float16\"] and candidate not in ['ref']) > 1",
    "min(speedup where seq_len in [1024, 2048]) > -1",
    "geomean(speedup where head_dim == 64 and kv_heads < 8) > 1",
    "  geomean(speedup)>=1.1\n and\tpass_rate==1  ",
])
def test_accepts(expr):
    bar = parse(expr)
    assert bar.clauses()


def test_scientific_and_negative_numbers():
    clauses = parse("min(speedup) > 1e-3 or max(speedup) < 2.5E2 or mean(ms) > -0.5").clauses()
    assert [c.threshold for c in clauses] == [1e-3, 250.0, -0.5]


def test_bare_bool_field_means_true():
    test = parse("min(speedup where causal) > 1").clauses()[0].aggregate.where
    assert (test.field, test.op, test.value) == ("causal", "==", True)


# ---------------------------------------------------------------- reject


def column_of(exc: BarError) -> int:
    return int(str(exc).split(" at column ")[1].split()[0])


@pytest.mark.parametrize("expr, fragment, column", [
    ("__import__('os')", "unknown aggregate '__import__'", 1),
    ("speedup.__class__", "unexpected character '.'", 8),
    ("geomean(sped) > 1", "unknown metric 'sped'", 9),
    ("min(speedup where dtype > 3)", "'>' does not apply to str field 'dtype'", 25),
    ("min(speedup where dtype == 3) > 1", "field 'dtype' is str, got number 3", 28),
    ("min(speedup where seq_len == \"2048\") > 1", "field 'seq_len' is int", 30),
    ("min(speedup where causal < true) > 1", "'<' does not apply to bool field 'causal'", 26),
    ("min(speedup where causal == 1) > 1", "field 'causal' is bool", 29),
    ("min(speedup where dtype == bfloat16) > 1", "expected a value for 'dtype'", 28),
    ("geomean(speedup) >=", "expected a number after '>=', got end of expression", 20),
    ("geomean(speedup) >= 1 extra", "unexpected 'extra'", 23),
    ("geomean(speedup) >= 1 and", "expected an aggregate, got end of expression", 26),
    ("'a' == 'a'", "expected an aggregate, got string 'a'", 1),
    ("", "empty expression", 1),
    ("   ", "empty expression", 1),
    ("speedup > 1", "'speedup' is a metric, not an aggregate", 1),
    ("exec('1') > 1", "unknown aggregate 'exec'", 1),
    ("sum(speedup) > 1", "unknown aggregate 'sum'", 1),
    ("geomean(speedup).real > 1", "unexpected character '.'", 17),
    ("geomean(min(speedup)) > 1", "aggregates do not nest", 9),
    ("geomean(seq_len) > 1", "'seq_len' is a filter field, not a metric", 9),
    ("geomean(where causal) > 1", "geomean needs a metric", 9),
    ("geomean > 1", "geomean needs a metric in parentheses", 9),
    ("pass_rate(speedup) == 1", "pass_rate takes no metric", 11),
    ("min(speedup where seqlen > 1) > 1", "unknown field 'seqlen'", 19),
    ("min(speedup where speedup > 1) > 1", "'speedup' is a metric; filters select configs", 19),
    ("min(speedup, ms) > 1", "expected ')' or 'where'", 12),
    ("min(speedup where seq_len = 1) > 1", "unexpected character '='", 27),
    ("geomean(speedup) > 1e", "malformed number '1e'", 20),
    ("geomean(speedup) > 1.", "malformed number '1.'", 20),
    ("geomean(speedup) > 1e999", "out of range", 20),
    ("geomean(speedup) > inf", "expected a number after '>', got 'inf'", 20),
    ("geomean(speedup) > true", "expected a number after '>', got 'true'", 20),
    ("geomean(speedup) 1", "expected a comparison after geomean, got number 1", 18),
    ("(geomean(speedup) > 1", "expected ')' to close '(', got end of expression", 22),
    ("min(speedup where dtype == \"bf16) > 1", "unterminated string", 28),
    ("min(speedup where dtype in []) > 1", "expected a value for 'dtype', got ']'", 29),
    ("Geomean(speedup) > 1", "unknown aggregate 'Geomean'", 1),
])
def test_rejects_with_message_and_column(expr, fragment, column):
    with pytest.raises(BarError) as info:
        parse(expr)
    message = str(info.value)
    assert message.startswith("bar: ")
    assert fragment in message
    assert column_of(info.value) == column


def test_error_shows_expression_and_caret():
    with pytest.raises(BarError) as info:
        parse("geomean(sped) > 1")
    first, shown, caret = str(info.value).splitlines()
    assert first.startswith("bar: unknown metric 'sped' at column 9 (known: speedup, ")
    assert shown == "  geomean(sped) > 1"
    assert caret == "  " + " " * 8 + "^"


def test_caret_lines_up_across_newlines_and_tabs():
    with pytest.raises(BarError) as info:
        parse("pass_rate == 1 and\n\tgeomean(sped) > 1")
    _, shown, caret = str(info.value).splitlines()
    assert shown[caret.index("^"):].startswith("sped")


def test_deep_nesting_is_a_bar_error_not_a_recursion_error():
    with pytest.raises(BarError, match="nesting deeper"):
        parse("(" * (MAX_NESTING + 1) + "pass_rate > 0" + ")" * (MAX_NESTING + 1))
    with pytest.raises(BarError, match="nesting deeper"):
        parse("not " * 10_000 + "pass_rate > 0")


def test_non_string_is_rejected():
    with pytest.raises(BarError, match="expected a string"):
        parse(1.1)  # type: ignore[arg-type]


# ---------------------------------------------------------------- evaluate


def test_example_passes_and_reports_each_clause():
    rows = [row(1024, 1.21), row(2048, 0.99), row(4096, 1.44)]
    outcome = evaluate(parse(EXAMPLE), rows)
    assert outcome.passed
    geo, low, rate = outcome.clauses
    assert geo.text == "geomean(speedup) >= 1.10"
    assert geo.value == pytest.approx((1.21 * 0.99 * 1.44) ** (1 / 3)) and geo.n == 3
    assert (low.value, low.n, low.op, low.threshold, low.passed) == (0.99, 2, ">=", 0.98, True)
    assert (rate.value, rate.n, rate.passed) == (1.0, 3, True)


def test_one_failing_clause_fails_the_and_and_is_visible():
    rows = [row(1024, 1.5), row(2048, 0.90), row(4096, 1.5)]
    outcome = evaluate(parse(EXAMPLE), rows)
    assert not outcome.passed
    assert [c.passed for c in outcome.clauses] == [True, False, True]
    assert outcome.clauses[1].value == 0.90


def test_incorrect_rows_lower_pass_rate_and_leave_metric_aggregates():
    rows = [row(1024, 1.2), row(2048, correct=False), row(4096, 1.4), row(8192, correct=False)]
    outcome = evaluate(parse("pass_rate == 1.0 or min(speedup) >= 1.2"), rows)
    rate, low = outcome.clauses
    assert (rate.value, rate.n, rate.passed) == (0.5, 4, False)
    assert (low.value, low.n, low.passed) == (1.2, 2, True)  # incorrect rows carry no speedup
    assert outcome.passed  # or
    counts = evaluate(parse("count(speedup) == 2 and count == 4 and count(where causal) == 0"), rows)
    assert [c.value for c in counts.clauses] == [2.0, 4.0, 0.0] and counts.passed


def test_metric_none_is_skipped_even_on_correct_rows():
    rows = [row(1024, tflops=100.0), row(2048, tflops=None), row(4096)]  # last has no key
    clause = evaluate(parse("mean(tflops) > 1"), rows).clauses[0]
    assert (clause.value, clause.n) == (100.0, 1)


def test_filters_select_rows():
    rows = [
        row(1024, 2.0, dtype="float16", causal=True),
        row(2048, 3.0, dtype="bfloat16", causal=True),
        row(4096, 5.0, dtype="bfloat16", causal=False, candidate="ref"),
        row(8192, correct=False, dtype="bfloat16", causal=False),
    ]
    cases = {
        'max(speedup where dtype == "bfloat16") > 0': (5.0, 2),
        "min(speedup where causal == true) > 0": (2.0, 2),
        "min(speedup where not causal) > 0": (5.0, 1),
        "mean(speedup where seq_len > 1024 and seq_len <= 4096) > 0": (4.0, 2),
        "median(speedup where seq_len < 2048 or seq_len >= 4096) > 0": (3.5, 2),
        "max(speedup where seq_len in [1024, 2048]) > 0": (3.0, 2),
        "max(speedup where candidate not in ['ref']) > 0": (3.0, 2),
        "max(speedup where candidate != 'ref' and not (causal and dtype == 'float16')) > 0": (3.0, 1),
        'pass_rate(where dtype == "bfloat16") > 0': (2 / 3, 3),
        "count(where not causal) > 0": (2.0, 2),
    }
    for expr, (value, n) in cases.items():
        clause = evaluate(parse(expr), rows).clauses[0]
        assert (clause.value, clause.n) == (pytest.approx(value), n), expr


def test_empty_selection_fails_closed():
    rows = [row(1024, 1.5), row(2048, 1.5)]
    outcome = evaluate(parse("min(speedup where seq_len >= 65536) >= 0.98"), rows)
    clause = outcome.clauses[0]
    assert (clause.value, clause.n, clause.passed, outcome.passed) == (None, 0, False, False)
    # even a comparison that any number would satisfy, and even under "not"
    for expr in ("max(speedup where dtype == 'float8') > -1e9",
                 "pass_rate(where dtype == 'float8') >= 0"):
        assert not evaluate(parse(expr), rows).passed
    # "not" of a clause over no rows is still unknown: no GO from data that does not exist
    assert not evaluate(parse("not pass_rate(where dtype == 'float8') >= 0"), rows).passed
    assert evaluate(parse("count(where dtype == 'float8') == 0"), rows).passed  # a count of nothing is 0
    assert not evaluate(parse(EXAMPLE), []).passed


def test_all_clauses_reported_in_source_order_without_short_circuit():
    rows = [row(1024, 0.5)]
    outcome = evaluate(parse("geomean(speedup) > 1 and (pass_rate == 1 or max(ms) > 0)"), rows)
    assert not outcome.passed
    assert [c.text for c in outcome.clauses] == [
        "geomean(speedup) > 1", "pass_rate == 1", "max(ms) > 0"]
    assert [c.passed for c in outcome.clauses] == [False, True, False]


def test_not_and_or_precedence():
    rows = [row(1024, 1.5)]
    # not binds tighter than and, and tighter than or:  (not A) or (B and C)
    outcome = evaluate(parse("not pass_rate == 1 or max(speedup) > 1 and min(speedup) > 2"), rows)
    assert not outcome.passed
    outcome = evaluate(parse("not (pass_rate == 1 and min(speedup) > 2)"), rows)
    assert outcome.passed


def test_geomean_of_non_positive_is_a_bug():
    with pytest.raises(ValueError, match="non-positive"):
        evaluate(parse("geomean(speedup) > 1"), [row(1024, 1.2), row(2048, 0.0)])


# ---------------------------------------------------------------- lone aggregate (primary metric)


def test_parse_and_evaluate_lone_aggregate():
    agg = parse_aggregate("median(speedup where causal)")
    assert (agg.func, agg.metric, agg.where.field) == ("median", "speedup", "causal")
    rows = [row(1024, 1.0, causal=True), row(2048, 3.0, causal=True), row(4096, 9.0)]
    assert evaluate_aggregate(agg, rows) == 2.0
    assert evaluate_aggregate(parse_aggregate("geomean(speedup where dtype == 'x')"), rows) is None


@pytest.mark.parametrize("expr, fragment, column", [
    ("geomean(speedup) >= 1", "unexpected '>='", 18),
    ("speedup", "'speedup' is a metric, not an aggregate", 1),
    ("", "empty expression", 1),
])
def test_lone_aggregate_rejects(expr, fragment, column):
    with pytest.raises(BarError) as info:
        parse_aggregate(expr)
    assert fragment in str(info.value) and column_of(info.value) == column


def test_negating_a_clause_over_no_rows_does_not_pass():
    rows = [{"workload": "attention", "batch": 1, "heads": 2, "kv_heads": 2, "seq_len": 128, "head_dim": 64,
             "dtype": "float32", "causal": False, "candidate": "sdpa", "correct": True, "speedup": 1.5}]
    assert not evaluate(parse("not min(speedup where seq_len >= 4096) < 0.98"), rows).passed
    assert not evaluate(parse('pass_rate(where candidate == "typo") == 1.0 or geomean(speedup) > 9'), rows).passed
    # an unknown clause cannot sink a disjunction whose other side holds
    assert evaluate(parse('min(speedup where seq_len >= 4096) > 1 or geomean(speedup) > 1.2'), rows).passed
    # nor rescue a conjunction
    assert not evaluate(parse('min(speedup where seq_len >= 4096) > 1 and geomean(speedup) > 1.2'), rows).passed
