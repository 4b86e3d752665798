"""The metric table is the one list of metrics: the bar language, reports and README read it."""

from __future__ import annotations

import re

import pytest

from harness.registration import bar, bar_syntax
from harness.vocab import metrics
from harness.reporting.analysis import report
from tests.conftest import REPO


def test_the_readme_metric_table_is_generated_from_the_table():
    text = (REPO / "README.md").read_text()
    m = re.search(r"<!-- metrics: generated[^\n]*-->\n(.*?)<!-- /metrics -->", text, re.S)
    assert m, "README.md lost its generated metric table (markers <!-- metrics: ... --> <!-- /metrics -->)"
    assert m.group(1) == metrics.markdown(), "README metric table is stale: paste metrics.markdown() between the markers"


def test_the_bar_accepts_exactly_the_tables_metrics():
    assert bar_syntax.METRICS == metrics.NAMES + metrics.PARAM_NAMES + metrics.LEDGER_NAMES + metrics.STEP_NAMES
    for name in bar_syntax.METRICS:
        arg = "(1980)" if name in metrics.PARAM_NAMES else ""  # a parameterised metric states its argument
        assert bar.parse(f"min({name}{arg}) > 0").clauses()[0].aggregate.metric == name
    with pytest.raises(bar.BarError, match="unknown metric 'kv_gbs'"):
        bar.parse("min(kv_gbs) > 0")


def test_reports_take_columns_and_formats_from_the_table():
    assert [c[0] for c in report.METRIC_COLUMNS] == [m.name for m in metrics.METRICS if m.label]
    assert all(metrics.BY_NAME[n].label == label and metrics.BY_NAME[n].fmt == fmt
               for n, label, fmt in report.METRIC_COLUMNS)
    assert report.SHOWN_ELSEWHERE <= set(metrics.NAMES)


def test_a_result_row_must_carry_exactly_the_tables_metrics():
    values = dict.fromkeys(metrics.NAMES, 1.0)
    assert list(metrics.result_metrics(values)) == list(metrics.NAMES)
    with pytest.raises(ValueError, match=r"not declared \['extra'\]"):
        metrics.result_metrics({**values, "extra": 1.0})
    with pytest.raises(ValueError, match=r"not computed \['ms'\]"):
        metrics.result_metrics({k: v for k, v in values.items() if k != "ms"})
    assert metrics.RATE_METRICS == {"ms", "tflops", "gbps", "kv_gbps", "tflops_frac", "gbps_frac", "kv_gbps_frac",
                                    "cycles", "tflops_at"}
    assert not set(metrics.PARAM_NAMES) & set(metrics.NAMES)  # computed where read: never a key of a row
    assert metrics.LEDGER_NAMES == ("speedup_next_low", "speedup_next_high")  # likewise (governance/nextrun.py)
    assert not set(metrics.LEDGER_NAMES) & set(metrics.NAMES)
