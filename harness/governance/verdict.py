"""The verdict: evaluate the registered bar on the ledger, write GO or NO-GO, close the line.

The bar sees one row per (config, candidate): the latest current (non-superseded)
outcome. Results marked ``impossible`` (faster than a measured ceiling) are excluded,
as are rig-noisy results (control outside tolerance) unless the registration says
``include_noisy = true``. A verdict is refused — not a NO-GO — when there are no
results, or when some (config, candidate) of the grid has no outcome row at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import UserError
from harness.governance import bar as barlang
from harness.governance.ledger import current_rows
from harness.governance.line import Line

# Kinds that settle a (config, candidate): the sweep has decided what happened to it.
OUTCOME_KINDS = ("result", "incorrect", "skipped", "throttled", "crashed", "unsupported")
GO, NO_GO = "GO", "NO-GO"


def outcome_key(row: dict) -> tuple[str, str]:
    return row["config_key"], row["candidate"]


def latest_outcomes(rows) -> dict[tuple[str, str], dict]:
    """The last current outcome row per (config, candidate)."""
    latest = {}
    for r in current_rows(rows):
        if r.get("kind") in OUTCOME_KINDS:
            latest[outcome_key(r)] = r
    return latest


def bar_rows(outcomes: dict, *, include_noisy: bool) -> tuple[list[dict], dict]:
    """Rows for the bar language, plus counts of what was left out and why."""
    rows, excluded = [], {}
    for r in outcomes.values():
        kind = r["kind"]
        if kind == "result":
            why = None
            if r.get("impossible"):
                why = "impossible"
            elif r.get("rig_noisy") and not include_noisy:
                why = "rig_noisy"
            if why:
                excluded[why] = excluded.get(why, 0) + 1
                continue
            rows.append({**r["config"], "candidate": r["candidate"], "correct": True, **r["metrics"]})
        elif kind == "incorrect" and r.get("role") == "baseline":
            # A hollow baseline is not a candidate failure: its candidates carry `skipped` rows.
            excluded["baseline_incorrect"] = excluded.get("baseline_incorrect", 0) + 1
        elif kind == "incorrect":
            rows.append({**r["config"], "candidate": r["candidate"], "correct": False})
        else:
            excluded[kind] = excluded.get(kind, 0) + 1
    return rows, excluded


@dataclass(frozen=True)
class Verdict:
    outcome: str
    bar: barlang.BarOutcome
    primary: str
    primary_value: float | None
    prediction: float
    n_rows: int
    excluded: dict
    row: dict  # the appended ledger row


def decide(line: Line, env: dict) -> Verdict:
    reg = line.reg
    outcomes = latest_outcomes(line.rows)
    missing = [(c.key(), k) for c in reg.configs for k in reg.candidates if (c.key(), k) not in outcomes]
    if missing:
        first = ", ".join(f"{k} @ {c}" for c, k in missing[:3])
        raise UserError(f"line '{reg.line}': {len(missing)} (config, candidate) pairs of the grid have no outcome yet "
                        f"(e.g. {first}): finish `bench sweep {reg.line}` before the verdict")
    rows, excluded = bar_rows(outcomes, include_noisy=reg.include_noisy)
    if not any(r["correct"] for r in rows):
        raise UserError(f"line '{reg.line}' has no usable result rows (outcomes: {excluded or 'only incorrect'}): "
                        f"a verdict needs measurements — nothing was decided")
    outcome = barlang.evaluate(barlang.parse(reg.go), rows)
    primary_value = barlang.evaluate_aggregate(barlang.parse_aggregate(reg.primary), rows)
    verdict = GO if outcome.passed else NO_GO
    payload = {
        **line.stamp(env).fields(),
        "outcome": verdict,
        "go": reg.go,
        "clauses": [{"text": c.text, "value": c.value, "op": c.op, "threshold": c.threshold,
                     "passed": c.passed, "n": c.n} for c in outcome.clauses],
        "primary": reg.primary,
        "primary_value": primary_value,
        "prediction": reg.prediction,
        "prediction_error": None if primary_value is None else primary_value - reg.prediction,
        "n_rows": len(rows),
        "n_correct": sum(r["correct"] for r in rows),
        "excluded": excluded,
        "decided_on": sorted(r["seq"] for r in outcomes.values()),
    }
    row = line.ledger.append("verdict", payload)
    return Verdict(verdict, outcome, reg.primary, primary_value, reg.prediction, len(rows), excluded, row)
