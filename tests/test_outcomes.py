"""One row vocabulary: the kinds, which outcomes are retried, and the resume key live in
vocab/outcomes.py; the rest of the harness names them, never restates them."""

from __future__ import annotations

import re

import pytest

from harness.ledger import store as ledger
from harness.vocab import outcomes
from harness.ledger.rows import UnknownField, load
from harness.commands import plan
from tests.conftest import REPO

KIND_LITERAL = re.compile(r"""(?:\bkind"?\]?\)?\s*(?:==|!=)\s*|\bOutcome\(|\.append\()["'](%s)["']"""
                          % "|".join(outcomes.ROW_KINDS))


def test_every_room_reads_the_kinds_from_one_module():
    assert ledger.KINDS == outcomes.ROW_KINDS
    assert set(outcomes.OUTCOME_KINDS) <= set(outcomes.ROW_KINDS)
    assert set(outcomes.FAILING_KINDS) | set(outcomes.MISSING_KINDS) | {outcomes.RESULT} == set(outcomes.OUTCOME_KINDS)
    assert plan.transient is outcomes.transient and plan.measured_on is outcomes.measured_on
    # measurement/ sits below governance: it may not import it (counters reads profile rows).
    # A job's kind (execution/executor.py: "config" or "ceilings") is not a row kind.
    restated = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
                for p in sorted((REPO / "harness").rglob("*.py"))
                if p.name != "outcomes.py" and "measurement" not in p.parts
                for n, line in enumerate(p.read_text().splitlines(), 1) if KIND_LITERAL.search(line) and "job.kind" not in line]
    assert restated == [], "kind literals outside vocab/outcomes.py:\n" + "\n".join(restated)


def test_transient_outcomes_are_the_ones_measured_again():
    assert outcomes.transient(load({"kind": "throttled"}))
    assert outcomes.transient(load({"kind": "skipped", "predicted_bytes": 1}))
    assert outcomes.transient(load({"kind": "skipped", "undersampled": True}))
    assert not outcomes.transient(load({"kind": "skipped", "reason": "baseline failed"}))
    assert not any(outcomes.transient(load({"kind": k})) for k in ("result", "incorrect", "crashed", "unsupported"))


def test_rejection_tags_name_the_phase_that_caught_them():
    assert outcomes.rejection_tag(outcomes.CAUGHT_TIMED, "stale_mismatch") == "timed_stale_mismatch"
    assert [outcomes.rejection_tag(p, "mismatch") for p in outcomes.REJECTION_PHASES] == [
        "timed_mismatch", "random_call_mismatch", "refreshed_mismatch", "sustained_mismatch", "recheck_mismatch"]
    with pytest.raises(ValueError, match="unknown rejection phase"):
        outcomes.rejection_tag("later", "mismatch")
    with pytest.raises(ValueError, match="unknown failure tag 'x'"):
        outcomes.rejection_tag(outcomes.CAUGHT_TIMED, "x")


def test_an_incorrect_rows_tag_is_one_of_the_vocabulary_written_or_read():
    """empty_window and remembers_inputs are tags as they are; a check's tag may carry its phase."""
    for tag in ("mismatch", outcomes.EMPTY_WINDOW, outcomes.REMEMBERS_INPUTS, "recheck_stale_mismatch",
                outcomes.rejection_tag(outcomes.CAUGHT_RANDOM_CALL, outcomes.CLOCK_TAMPERED)):
        assert outcomes.is_failure_tag(tag) and load({"kind": "incorrect", "tag": tag}).tag == tag
    for tag in ("x", "timed_empty_window", "recheck_", "later_mismatch"):
        assert not outcomes.is_failure_tag(tag)
        with pytest.raises(UnknownField, match=f"tag {tag!r} is no failure tag"):
            load({"kind": "incorrect", "tag": tag})
