"""The verdict: evaluate the registered bar on the ledger, write GO or NO-GO, close the line.

The bar sees one row per registered (config, candidate): the latest current
(non-superseded) outcome. Crashed kernels and results faster than a measured ceiling
(``impossible``) count as failed pairs; rig-noisy results (control outside tolerance) are
left out unless the registration says ``include_noisy = true``. A line whose bar has no
correct row because every pair it decides on failed its kernel (``failed_alone``) is NO-GO,
the failures its evidence: a pre-registered hypothesis whose kernel is wrong has failed. A
verdict is refused — not a NO-GO — when a pair has no outcome, when pairs were never
measured (skipped, unsupported, throttled) and the registration does not ``allow_missing``,
when the outcomes come from more than one commit or device, when nothing was measured at
all (or pairs the bar cannot use remain beside failures: they could still pass), or
while any row of the line is not committed, or when a result row's figures disagree with its
own samples (``ledger.verify.verify``, ledger/audit.py). A refusal over pairs it cannot use names
`bench sweep LINE --remeasure`, which measures them again at the same commit; the verdict
then decides on the newest measurement and its row lists each pair so re-measured
(``remeasured``). The verdict row is committed at once,
so a decided line cannot be quietly re-rolled; a dry run (``dry_run=True``, `bench verdict
--no-commit`) decides the same way and writes nothing, so a verdict row exists only
committed and a NO-GO cannot be deleted without a trace.

A line with ``[replication] instances = N`` also waits for N device instances with complete
grids at its commit on its stack (the line's own and the replicates written before the verdict,
registration/replication.py) and decides its bar over them by ``combine``; the row records each
instance's clause values (``replication``). Replicates written after the verdict never change it.

A line with ``[verify]`` clauses also needs counters (`profile` rows) for every candidate
result, measured where the results were: a clause must hold on each of them for a GO,
and a result whose counters show fewer DRAM reads than any correct kernel makes
(counters.counter_impossible) counts as a failed pair, as the time reductio does.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import UserError
from harness.registration import bar as barlang
from harness.registration import verify as verifylang
from harness.ledger.store import require_anchored
from harness.ledger.rows import VerdictRow, load
from harness.ledger.line_payloads import Coverage, Probe
from harness.ledger.payloads import Amdahl, Metrics, OpShare
from harness.governance.line import Line
from harness.vocab.devices import stack_text
from harness.vocab.outcomes import (FAILING_KINDS, MISSING_KINDS, PROFILE, RESULT, VERDICT, current_rows,
                                         UNSUPPORTED, coverage, kernel_failed, latest_outcomes, measured_on,
                                         outcome_key, places, remeasures, state_of)
from harness.registration.bar import INTEGRATION_FLAG, PEERS_KEY, UNCOMPARED_KEY, uncompared_rows
from harness.governance.peers import OTHER_RUN, peer_speedups
from harness.governance.nextrun import NEXT_RUN_NAMES, bar_between_run, next_bounds
from harness.measurement.nextrun import BetweenRun
from harness.registration.integration import ceiling_text
from harness.vocab.outcomes import INTEGRATION
from harness.ledger.audit import unchecked
from harness.vocab.devices import instance
from harness.registration.replication import combined, registered_pairs, waited_for

GO, NO_GO = "GO", "NO-GO"
# Failing pairs a verdict row lists per [verify] clause (the count is always complete).
MAX_LISTED_FAILURES = 5


def bar_rows(outcomes: dict, *, include_noisy: bool, next_run=None) -> tuple[list[dict], dict]:
    """Rows for the bar language, plus counts of what was left out and why.

    A crashed kernel and a result faster than the device can go ("impossible": work was
    skipped, the llama-bench decode artifact's reductio) count as failed pairs, not as missing ones.
    """
    by_key, excluded = bar_row_map(outcomes, include_noisy=include_noisy, next_run=next_run)
    return list(by_key.values()), excluded


def bar_row_map(outcomes: dict, *, include_noisy: bool, next_run=None) -> tuple[dict, dict]:
    """``bar_rows`` keyed as ``outcomes`` (only the keys the bar sees): a report finds the bar
    row of each ledger row. A correct row carries its speedups over the other candidates of
    its config's measurement under ``bar.PEERS_KEY``, and why it has none over the others
    under ``bar.UNCOMPARED_KEY`` (governance/peers.py). With ``next_run`` (a
    ``measurement.nextrun.BetweenRun``: ``nextrun.bar_between_run``, for a bar that names the
    next-run metrics) a correct result also carries ``speedup_next_low`` / ``speedup_next_high``."""
    rows, excluded = {}, {}

    def leave_out(why):
        excluded[why] = excluded.get(why, 0) + 1

    for key, r in outcomes.items():
        kind = r.kind
        failed = {**r.config, "candidate": r.candidate, "correct": False}
        if r.role == "baseline":
            leave_out("baseline_incorrect")  # its candidates carry `skipped` rows
        elif kind == RESULT and r.impossible:
            rows[key] = failed
            leave_out("impossible")
        elif kind == RESULT and r.rig_noisy and not include_noisy:
            leave_out("rig_noisy")
        elif kind == RESULT:
            rows[key] = {**r.config, "candidate": r.candidate, "correct": True, **r.metrics}
            if next_run is not None:  # computed where read (governance/nextrun.py), never stored

                rows[key].update(zip(NEXT_RUN_NAMES, next_bounds(r, next_run)))
        elif kind in FAILING_KINDS:
            rows[key] = failed
        else:
            leave_out(kind)
    values, why = peer_speedups(outcomes, {key for key, row in rows.items() if row["correct"]})
    for key, v in values.items():
        rows[key] = {**rows[key], PEERS_KEY: v, UNCOMPARED_KEY: why[key]}
    return rows, excluded


def other_runs(reg, rows: list[dict]) -> list[str]:
    """The comparisons a peer clause of ``reg``'s bar needs that the rows hold from two runs:
    "A vs P at CONFIG" (P measured again, alone, after A's result was decided)."""
    out = []
    for agg in [c.aggregate for c in reg.bar.clauses()] + [reg.primary_aggregate]:
        for row in uncompared_rows(agg, rows):
            kind, why = (row.get(UNCOMPARED_KEY) or {}).get(agg.peer, (None, None))
            if kind == OTHER_RUN and why not in out:
                out.append(why)
    return out


# Undecided pairs named in a refusal (the verdict row lists them all).
MAX_NAMED_PAIRS = 6


def latest_profiles(rows, where: tuple) -> dict[tuple[str, str], dict]:
    """The last current `profile` row with counters per (config, kernel), measured at ``where``."""
    latest = {}
    for r in current_rows(rows):
        if r.kind == PROFILE and r.counters and measured_on(r) == where:
            latest[outcome_key(r)] = r
    return latest


def verify_clauses(reg, deciding: list[dict], rows, where: tuple) -> tuple[tuple, dict]:
    """The [verify] clauses over the counters of every candidate result, and the results
    whose counters show an impossible read count ((config, candidate) -> reason).

    Refused when a result has no counters measured where it was: the claim was never checked.
    """
    results = [r for r in deciding if r.kind == RESULT]
    profiles = latest_profiles(rows, where)
    missing = [outcome_key(r) for r in results if outcome_key(r) not in profiles]
    if missing:
        first = ", ".join(f"{k} @ {c}" for c, k in missing[:3])
        raise UserError(f"line '{reg.line}' has [verify] clauses but {len(missing)} results have no counters from "
                        f"this commit and device (e.g. {first}): run `bench sweep {reg.line}` on a GPU with ncu to "
                        f"profile them")
    pairs, impossible, missing = [], {}, {}
    for r in results:
        p = profiles[outcome_key(r)]
        bare, why = verifylang.bare_env(p.bare)
        env = {**p.formulas, **p.counters, **bare}
        if not p.correct:
            env = {}  # counters of a call whose output failed the check decide nothing: unknown
        pairs.append((r.config_key, r.candidate, env))
        missing[(r.config_key, r.candidate)] = why
        if p.impossible:
            impossible[outcome_key(r)] = f"counters: {p.impossible}"
    return verifylang.evaluate(reg.verify_clauses, pairs, missing), impossible


@dataclass(frozen=True)
class Verdict:
    outcome: str
    bar: barlang.BarOutcome
    primary: str
    primary_value: float | None
    prediction: float
    n_rows: int
    excluded: dict
    row: VerdictRow  # the appended ledger row (before it is written: the row to write, unchained)
    anchored: str | None  # the commit holding the verdict row (None until written)
    verify: tuple = ()  # verify.ClauseResult per [verify] clause
    dry_run: bool = False  # nothing was written


def integration_rows(reg, rows, where: tuple) -> list[tuple]:
    """(ledger row, bar row) of the latest `integration` row per candidate measured where the
    kernel outcomes were; a refusal when the step was not timed there, or when a measured
    step gain is above the Amdahl ceiling (``amdahl_violated``: the verdict decides nothing
    until an amendment explains the share)."""
    latest = {r.candidate: r for r in current_rows(rows)
              if r.kind == INTEGRATION and measured_on(r, reg.mixed_devices) == where}
    missing = [c for c in reg.candidates if c not in latest]
    if missing:
        raise UserError(f"line '{reg.line}': the model step of [integration] was not timed with "
                        f"{', '.join(missing)} where the kernels were measured: run `bench sweep {reg.line}` to "
                        f"finish it before the verdict")
    out = []
    for c in reg.candidates:
        r = latest[c]
        row = integration_bar_row(r, include_noisy=reg.include_noisy)
        if row["correct"] and r.amdahl_violated:
            v, used = Amdahl.from_row(r.amdahl_violated), OpShare.from_row(r.op_share_used or {})
            raise UserError(
                f"line '{reg.line}': amdahl_violated — {c}'s measured step gain {v.gain:+.2%} is above the "
                f"Amdahl ceiling of {ceiling_text(v.op_share, used.source)}; the op must have taken at "
                f"least 1 − 1/(1 + {v.gain:.4g}) = {v.inverted_share:.1%} of the step (ledger row "
                f"{r.seq}). The verdict decides nothing until this is explained: register an amendment "
                f"(amends = \"{reg.line}\") stating the share and where the time really goes")
        out.append((r, row))
    return out


def integration_bar_row(r, *, include_noisy: bool) -> dict:
    """An `integration` row as the bar reads it: its step metrics, counted (``correct``) when
    it passed the float64 check and was timed, not throttled, and not rig-noisy (unless the
    line counts noisy rows)."""
    usable = bool(r.correct) and r.metrics is not None and not r.throttled and (include_noisy or not r.rig_noisy)
    return {INTEGRATION_FLAG: True, "candidate": r.candidate, "correct": usable, **(r.metrics or {})}


def integration_summary(row) -> dict:
    """What the verdict row keeps of one integration row: the measured step gain beside the
    one the kernel's probe predicted, and the probe → in-situ factor."""
    m = Metrics.from_row(row.metrics or {})
    return {"seq": row.seq, "candidate": row.candidate, "correct": row.correct, "rig_noisy": row.rig_noisy,
            "throttled": row.throttled, "step_gain": m.step_gain,
            "step_gain_predicted": m.step_gain_predicted, "probe_factor": m.probe_factor,
            "op_share": m.op_share, "op_share_used": row.op_share_used,
            "probe_source": Probe.from_row(row.probe or {}).source}


def require_checked(reg, deciding) -> None:
    """Refuse a bar reading a figure that ``ledger verify`` could not check on a result it decides
    on (``audit.unchecked``: a row written before bench kept that figure's raw data): such a
    figure could have been rewritten, and re-hashed, before its commit."""
    read = sorted({c.aggregate.metric for c in reg.bar.clauses() if c.aggregate.metric})
    for r in deciding:
        for metric in read:
            why = unchecked(metric, r) if r.kind == RESULT else None
            if why:
                raise UserError(f"line '{reg.line}': its bar reads {metric}, which `bench ledger verify` could not "
                                f"check on row {r.seq} ({r.candidate} @ {r.config_key}): {why} — sweep the line at a "
                                f"new commit with this bench, whose rows keep it, before the verdict")


def failed_alone(reg, by_pair: dict) -> list[dict]:
    """A line whose bar has no correct row to judge: the evidence of a NO-GO when every pair it
    decides on failed its kernel (``outcomes.kernel_failed``) — a pre-registered hypothesis
    whose kernel is wrong has failed — each pair's row, state and the reason it carries.
    Refused while any pair is not settled that way (rig-noisy, skipped, throttled, or behind a
    failed baseline: measured again, or the line's tolerance fixed), or none failed: nothing
    was measured to decide on. Unsupported pairs (allowed by ``allow_missing``) are no evidence."""
    failed = [r for r in by_pair.values() if kernel_failed(r)]
    others = [r for r in by_pair.values() if not kernel_failed(r)]
    unsettled = [r for r in others if r.kind != UNSUPPORTED]
    if failed and not unsettled:
        return [{"seq": r.seq, "config_key": r.config_key, "candidate": r.candidate, "state": state_of(r),
                 "tag": r.tag, "reason": r.impossible if r.kind == RESULT else r.reason} for r in failed]

    def state(r) -> str:
        return "baseline_incorrect" if r.is_baseline else state_of(r)

    def counts(rows) -> str:
        states: dict = {}
        for r in rows:
            states[state(r)] = states.get(state(r), 0) + 1
        return ", ".join(f"{k}: {n}" for k, n in sorted(states.items()))

    if not failed:
        raise UserError(f"line '{reg.line}' has no usable result rows (outcomes: {counts(others)}): a verdict needs "
                        f"measurements — nothing was decided; run `bench sweep {reg.line} --remeasure` to measure "
                        f"again what can be, or run the line where its kernels support its configs")
    shown = ", ".join(f"{r.candidate} @ {r.config_key} ({state(r)})" for r in unsettled[:MAX_NAMED_PAIRS])
    more = len(unsettled) - MAX_NAMED_PAIRS
    raise UserError(f"line '{reg.line}': every pair decided so far failed its kernel ({len(failed)}), but "
                    f"{len(unsettled)} are not settled ({counts(unsettled)}: {shown}"
                    f"{f' and {more} more' if more > 0 else ''}) "
                    f"and could still pass — run `bench sweep {reg.line} --remeasure` to measure them again "
                    f"before the verdict")


def instance_bar_rows(reg, by_pair: dict) -> list[dict]:
    """The bar rows of one instance's outcomes (``by_pair``: registered pair -> row), refused as
    the line's own are: a figure ``ledger verify`` could not check, a peer clause over two runs."""
    require_checked(reg, by_pair.values())
    rows, _ = bar_rows(by_pair, include_noisy=reg.include_noisy)
    split = other_runs(reg, rows)
    if split:
        raise UserError(f"line '{reg.line}': a replicate's peer clause compares results of two runs ({split[0]}): "
                        f"a candidate is compared with a peer only in the same interleaved rounds — replicate the "
                        f"line again on another instance, where every pair is measured afresh")
    return rows


def replicated_bar(reg, ledger_rows, deciding: list, rows: list[dict], where: tuple, stack: dict):
    """A ``[replication]`` line's bar (registration/replication.py): refused until the instances
    it waits for hold complete grids at ``where`` on ``stack``, then combined by its rule over
    the line's own bar rows (``rows``) and each replicate's."""
    pairs = registered_pairs(reg)
    per = [(instance(deciding[0].env or {}), [r.seq for r in deciding], rows)]
    for g in waited_for(reg, ledger_rows, deciding, where, stack):
        per.append((g.instance, [r.seq for r in g.deciding(pairs)],
                    instance_bar_rows(reg, {p: g.rows[p] for p in pairs})))
    return combined(reg, per)


def _deciding_rows(line: Line) -> list:
    """The latest outcome of every registered (config, candidate), or the refusal naming
    pairs that have none yet."""
    reg = line.reg
    outcomes = latest_outcomes(line.rows)
    pairs = [(c.key(), k) for c in reg.configs for k in reg.candidates]
    missing = [p for p in pairs if p not in outcomes]
    if missing:
        first = ", ".join(f"{k} @ {c}" for c, k in missing[:3])
        raise UserError(f"line '{reg.line}': {len(missing)} (config, candidate) pairs of the grid have no outcome yet "
                        f"(e.g. {first}): finish `bench sweep {reg.line}` before the verdict")
    return [outcomes[p] for p in pairs]


def _one_place(reg, deciding: list) -> tuple[list, list[str], list]:
    """Where the deciding rows were measured (``measured_on``), the GPU models, and their
    places (``places``): refused unless one commit, one device, one software stack."""
    where = sorted({measured_on(r, reg.mixed_devices) for r in deciding}, key=str)
    gpus = sorted({measured_on(r)[2] for r in deciding if measured_on(r)[2]})
    if len(where) > 1 and len({(w[0], w[1], w[3]) for w in where}) == 1:
        raise UserError(f"line '{reg.line}': its outcomes were measured on {len(where)} GPU models "
                        f"({', '.join(gpus)}): a verdict over mixed devices needs a line registered with "
                        f"[bar] mixed_devices = true — or run `bench sweep {reg.line}` on one model")
    # One place: one commit, one device, one software stack (a version one row never recorded is no difference).
    at = places(deciding, reg.mixed_devices)
    if len(at) > 1:
        stacks = len({stack_text(s) for _, s in at}) > 1
        shown = "; ".join(f"{c[:12]} on {d}{' ' + g if g else ''}{' with ' + code if code else ''}"
                          f"{' (' + stack_text(s) + ')' if stacks else ''}" for (c, d, g, code), s in at[:4])
        again = (" — sweep it again on the one stack it should be decided with, at a new commit (a commit outside "
                 "ledger/: a pair is measured once per commit)") if stacks else \
            f" — run `bench sweep {reg.line}` at HEAD where it should be decided"
        raise UserError(f"line '{reg.line}': its outcomes were measured in {len(at)} places ({shown}): one verdict "
                        f"needs one commit on one device{' with one software stack' if stacks else ''}{again}")
    return where, gpus, at


def _require_measured(reg, deciding: list) -> None:
    """Refuse pairs never measured (skipped, unsupported, throttled) unless ``allow_missing``."""
    unmeasured: dict[str, int] = {}
    for r in deciding:
        if r.kind in MISSING_KINDS:
            unmeasured[r.kind] = unmeasured.get(r.kind, 0) + 1
    if unmeasured and not reg.allow_missing:
        counts = ", ".join(f"{k}: {n}" for k, n in sorted(unmeasured.items()))
        again = sum(n for k, n in unmeasured.items() if k != UNSUPPORTED)
        fix = (f"run `bench sweep {reg.line} --remeasure` to measure the skipped and throttled pairs again at this "
               f"commit" if again else "run the line where its kernels support every config")
        raise UserError(f"line '{reg.line}': {sum(unmeasured.values())} pairs were never measured ({counts}); a bar over "
                        f"the rest could pass on what was left out — {fix}, or register a line with [bar] "
                        f"allow_missing = true")


def _checked_pairs(line: Line, deciding: list, where: tuple) -> tuple[dict, tuple]:
    """The deciding rows by pair, a result its counters show impossible marked so ([verify]),
    and the [verify] clauses checked; refused while a result's figures are not audited."""
    reg = line.reg
    by_pair = {outcome_key(r): r for r in deciding}
    checked: tuple = ()
    if reg.verify:
        checked, counter_impossible = verify_clauses(reg, deciding, line.rows, where)
        for pair, why in counter_impossible.items():
            prior = by_pair[pair].impossible
            by_pair[pair] = by_pair[pair].replace(impossible=f"{prior}; {why}" if prior else why)
    require_checked(reg, by_pair.values())
    return by_pair, checked


def _require_one_run(reg, rows: list[dict]) -> None:
    """Refuse a peer clause that would compare results of two runs (``other_runs``)."""
    split = other_runs(reg, rows)
    if split:
        raise UserError(f"line '{reg.line}': a peer clause compares results of two runs ({split[0]}"
                        f"{f'; and {len(split) - 1} more' if len(split) > 1 else ''}): a candidate is compared with a "
                        f"peer only in the same interleaved rounds, and a decided result is never measured again at "
                        f"its commit — sweep the line at a new commit, where every pair is measured afresh")


def _require_coverage(reg, by_pair: dict) -> dict:
    """The bar's coverage of the registered pairs, refused below ``min_coverage``."""
    cov = coverage(list(by_pair.values()), include_noisy=reg.include_noisy)
    c = Coverage.from_row(cov)
    if c.fraction < reg.min_coverage:
        shown = ", ".join(c.undecided[:MAX_NAMED_PAIRS])
        more = len(c.undecided) - MAX_NAMED_PAIRS
        raise UserError(f"line '{reg.line}': the bar would decide on {c.decided} of {c.pairs} registered "
                        f"pairs ({c.fraction:.0%} < min_coverage {reg.min_coverage:g}); undecided: {shown}"
                        f"{f' and {more} more' if more > 0 else ''} — run `bench sweep {reg.line} --remeasure` "
                        f"(on a quieter machine) to measure them again at this commit, or register a line with "
                        f"[bar] min_coverage set to what it may decide on")
    return cov


@dataclass(frozen=True)
class _Evidence:
    """What the bar is evaluated on, every refusal passed: the deciding rows, where they were
    measured, the bar's rows (and what was left out), coverage, integration steps, the
    [verify] clauses checked, and the next-run interval's between-run variance."""

    deciding: list
    where: list
    gpus: list[str]
    at: list
    by_pair: dict
    checked: tuple
    next_run: BetweenRun | None
    rows: list[dict]
    excluded: dict
    cov: dict
    steps: list


def _evidence(line: Line) -> _Evidence:
    """The rows the bar decides on, or the refusal (in this order) of a line not ready for one."""
    reg = line.reg
    deciding = _deciding_rows(line)
    where, gpus, at = _one_place(reg, deciding)
    _require_measured(reg, deciding)
    by_pair, checked = _checked_pairs(line, deciding, where[0])
    # The next-run interval's between-run variance, where the bar reads it (governance/nextrun.py):
    # the replicates among the line's runs, else the deciding rows' controls, never below the floor.
    next_run = bar_between_run(reg.go, reg.primary, line.rows, by_pair)
    rows, excluded = bar_rows(by_pair, include_noisy=reg.include_noisy, next_run=next_run)
    _require_one_run(reg, rows)
    cov = _require_coverage(reg, by_pair)
    steps = integration_rows(reg, line.rows, where[0]) if reg.integration is not None else []
    rows += [r for _, r in steps]
    return _Evidence(deciding, where, gpus, at, by_pair, checked, next_run, rows, excluded, cov, steps)


def decide(line: Line, env: dict, *, dry_run: bool = False) -> Verdict:
    """Evaluate the bar on the line's committed rows: the verdict and the row it closes the line
    with, written by ``commands.verdict.close`` (this writes nothing); ``dry_run``: say so."""
    reg = line.reg
    ev = _evidence(line)
    rows, checked, by_pair, where = ev.rows, ev.checked, ev.by_pair, ev.where
    failures = None if any(r["correct"] for r in rows) else failed_alone(reg, by_pair)
    replicated = None
    if reg.replication is not None and reg.replication.required:
        replicated = replicated_bar(reg, line.rows, ev.deciding, rows, where[0], ev.at[0][1])
        outcome = barlang.BarOutcome(replicated.passed, replicated.clauses)
        primary_value = replicated.primary_value
    else:
        outcome = barlang.evaluate(reg.bar, rows)
        primary_value = barlang.evaluate_aggregate(reg.primary_aggregate, rows)
    verdict = GO if failures is None and outcome.passed and all(c.passed is True for c in checked) else NO_GO
    payload = {
        **line.stamp(env).fields(),
        "outcome": verdict,
        "go": reg.go,
        "clauses": [{"text": c.text, "value": c.value, "op": c.op, "threshold": c.threshold,
                     "passed": c.passed, "n": c.n, **({"note": c.note} if c.note else {})} for c in outcome.clauses],
        "primary": reg.primary,
        "primary_value": primary_value,
        **({"primary_note": note} if (note := barlang.uncompared_note(reg.primary_aggregate, rows)) else {}),
        "verify": [c.as_row(MAX_LISTED_FAILURES) for c in checked],
        "prediction": reg.prediction,
        "prediction_error": None if primary_value is None else primary_value - reg.prediction,
        "n_rows": len(rows),
        "n_correct": sum(r["correct"] for r in rows),
        "excluded": ev.excluded,
        "decided_on": sorted(r.seq for r in ev.deciding),
        # Pairs decided on a re-measure: the rows it superseded at the same commit and device.
        "remeasured": [m.as_row() for m in remeasures(line.rows) if (m.config_key, m.candidate) in by_pair],
        "coverage": {**ev.cov, "min_coverage": reg.min_coverage},
        "measured_at": {"commit": where[0][0], "device": where[0][1], "gpu": " + ".join(ev.gpus) or None,
                        "stack": ev.at[0][1]},
        **({"integration": [integration_summary(row) for row, _ in ev.steps]} if ev.steps else {}),
        **({"failures": failures} if failures is not None else {}),
        # What the next-run metrics were read with (a bar naming none: no field, as before issue 48).
        **({"next_run": ev.next_run.as_dict()} if ev.next_run is not None else {}),
        **({"replication": replicated.record} if replicated is not None else {}),
    }
    require_anchored(line.ledger, "a verdict")
    return Verdict(verdict, outcome, reg.primary, primary_value, reg.prediction, len(rows), ev.excluded,
                   load({**payload, "kind": VERDICT, "line": reg.line}), None, checked, dry_run=dry_run)
