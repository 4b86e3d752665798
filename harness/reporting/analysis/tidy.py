"""The tidy view of a ledger: one row per (config, candidate) outcome, named metric columns.

``ledger show --csv`` flattens every nested field (hundreds of columns, samples as list
strings); the tidy view is what a notebook or a spreadsheet wants instead: config fields
as typed columns, each metric of the row's ``metrics`` dict as its own float column (new
metrics appear without code changes), the outcome kind and its reason, sample counts and
the clock summary (``sm_clock_mean_mhz``: the interleaved rounds'; the ``sm_mhz`` metric is
the clock of the rates, measured under ``rate_protocol``). Superseded rows are left out; rows of every commit are kept (the
``commit`` column tells them apart), a replicate's too (``replicate`` names it: `bench replicate`;
null on the line's own rows).
"""

from __future__ import annotations

from pathlib import Path

from harness.vocab.outcomes import OUTCOME_KINDS, RESULT
from harness.jsonsafe import number
from harness.vocab.outcomes import current_rows
from harness.vocab.metrics import rate_protocol
from harness.reporting.analysis.lines import arm_samples
from harness.vocab.devices import instance_text
from harness.ledger.format import read_rows
from harness.ledger.payloads import Clock, Env, Figures, Gate, Measurement, Rounds, by_role
from harness.ledger.line_payloads import Replicate

CONFIG_COLUMNS = ("workload", "batch", "heads", "kv_heads", "seq_len", "head_dim", "dtype", "causal")
# pandas dtypes of the config columns (nullable, so a missing field stays <NA>, not a float NaN).
CONFIG_DTYPES = {"workload": "string", "batch": "Int64", "heads": "Int64", "kv_heads": "Int64", "seq_len": "Int64",
                 "head_dim": "Int64", "dtype": "string", "causal": "boolean"}
LEAD_COLUMNS = ("line", "seq", "kind", "commit", "device", "gpu", "config_key", "candidate", "role", "baseline")
TAIL_COLUMNS = ("n_samples", "n_baseline_samples", "n_rounds", "n_dropped_rounds", "sm_clock_mean_mhz", "rate_protocol",
                "timing_mode",
                "rig_noisy", "impossible", "gate_pass_rate", "gate_tolerance_ratio", "reason", "time", "replicate")


def tidy_records(rows) -> tuple[list[dict], list[str]]:
    """(records, metric names in first-seen order) for every current outcome row."""
    records, metrics = [], []
    for r in current_rows(rows):
        if r.kind not in OUTCOME_KINDS:
            continue
        env = Env.from_row(r.env or {})
        cfg = r.config or {}
        timing = Measurement.from_row(r.timing or {})
        clock = Clock.from_row(timing.clock or {})
        gate = Gate.from_row(by_role(r.gate or {}, "candidate") or {})
        rec = {"line": r.line, "seq": r.seq, "kind": r.kind, "commit": r.commit,
               "device": env.device, "gpu": env.gpu, "config_key": r.config_key,
               "candidate": r.candidate, "role": r.role or "candidate", "baseline": r.baseline,
               **{c: cfg.get(c) for c in CONFIG_COLUMNS}}
        for name, value in (r.metrics or {}).items():
            if name not in metrics:
                metrics.append(name)
            rec[name] = number(value)
        is_result = r.kind == RESULT
        rounds = timing.rounds or {}
        rec.update({
            "n_samples": len(arm_samples(r, "candidate")) if is_result else None,
            "n_baseline_samples": len(arm_samples(r, "baseline")) if is_result else None,
            "n_rounds": timing.n_rounds,
            "n_dropped_rounds": timing.n_dropped if timing.has("n_dropped") else
            len(Rounds.from_row(rounds).dropped or []) if rounds else None,
            "sm_clock_mean_mhz": number(clock.mean_mhz),
            # Which protocol the rate metrics (ms, tflops, gbps, fractions, sm_mhz, power_w) come from.
            "rate_protocol": rate_protocol(r) if is_result else None,
            "timing_mode": timing.effective_mode or timing.mode,
            "rig_noisy": bool(r.rig_noisy) if is_result else None,
            "impossible": bool(r.impossible) if is_result else None,
            "gate_pass_rate": number(gate.pass_rate),
            "gate_tolerance_ratio": number(_worst_ratio(gate)),
            "reason": None if is_result else (f"[{r.tag}] " if r.tag else "") + str(r.reason or ""),
            "time": r.time,
            "replicate": replicate_text(r.replicate),
        })
        records.append(rec)
    return records, metrics


def _worst_ratio(gate: Gate):
    """The gate's worst check's error as a fraction of its tolerance (None: none recorded)."""
    check = gate.worst_check
    figures = Figures.from_row(check.figures) if check is not None else None
    return figures.tolerance_ratio if figures is not None else None


def replicate_text(rep: dict | None) -> str | None:
    """A replicate row's ``replicate`` for a table cell: of which verdict, on which instance,
    at which commit, on which stack (None: the line's own row)."""
    if not rep:
        return None

    held = Replicate.from_row(rep)
    of = "before the verdict" if held.of is None else f"of verdict row {held.of}"
    other = ", another stack" if held.stack == "other" else ""
    return f"{of}, {instance_text(held.instance or {})}, {held.at} commit{other}"


def tidy_frame(rows):
    """The tidy view as a pandas DataFrame with typed columns."""
    import pandas as pd

    records, metrics = tidy_records(rows)
    columns = [*LEAD_COLUMNS, *CONFIG_COLUMNS, *metrics, *TAIL_COLUMNS]
    df = pd.DataFrame.from_records(records, columns=columns)
    types = {**CONFIG_DTYPES, **{m: "float64" for m in metrics}, "seq": "Int64", "n_samples": "Int64",
             "n_baseline_samples": "Int64", "n_rounds": "Int64", "n_dropped_rounds": "Int64",
             "sm_clock_mean_mhz": "float64", "rig_noisy": "boolean", "impossible": "boolean",
             "gate_pass_rate": "float64", "gate_tolerance_ratio": "float64"}
    for col in ("line", "kind", "commit", "device", "gpu", "config_key", "candidate", "role", "baseline", "timing_mode",
                "rate_protocol", "reason", "time", "replicate"):
        types[col] = "string"
    return df.astype(types)


def tidy(path: Path):
    """``tidy(ledger/<line>.jsonl)``: the tidy DataFrame of one ledger file."""
    return tidy_frame(read_rows(Path(path)))
