"""Replication (issue 48, item 3): a line's grid measured again on another device instance —
another card of the same model, or another host — and recorded beside the line's own rows.

A device *instance* is its host (hashed) and its card's UUID or serial (devices.instance; on
the CPU the host alone). `bench replicate LINE` (commands/replicate.py) sweeps the line's grid on
one instance and stamps each row it writes with ``replicate``::

    {"of": <seq of the verdict row replicated, or null: before the verdict>,
     "closing_commit": <the commit the verdict decided on (before it: the line's rows')>,
     "at": "closing" | "later",          # measured at that commit, or at a later one (--later)
     "instance": {"host", "gpu_uuid", "gpu_serial"},
     "stack": "same" | "other"}          # the verdict's software stack, or another (--other-stack)

Such rows are never the line's own (``outcomes.current_outcomes`` leaves them out): resume,
the verdict, compare, route and bisect never read them, so a closed verdict cannot change. What
they are read for:

- **agreement** (reporting/analysis/replication.py): each replicate's bar, clause by clause,
  beside the verdict's, and the spread of each clause's value across instances;
- **a verdict that waits for them**: a registration with ``[replication] instances = N`` (N
  counts the instance the line was swept on; schema 7) is not decided until N - 1 other
  instances hold a complete grid at the line's commit on its software stack (``waited_for``),
  then decided by ``combine`` (``combined``): ``all`` — every instance's bar passes; ``pooled``
  — the bar evaluated once over every instance's rows together (each registered pair counted
  once per instance: a geomean over all of them, a pass rate over all of them, a min over all
  of them); ``worst`` — each clause at its least favourable instance value (the least for a
  ``>=`` clause, the greatest for ``<=``; a clause under ``not`` the other way), the bar
  combined from those.

Refusals (one line, exit 2, nothing written; ``target``, ``at_commit``, ``check_instance``): a
line not closed (unless its verdict waits for replicates); the verdict's own instance, or one
already holding rows of the line at this commit; another device model (unless ``[bar]
mixed_devices``); another software stack (unless ``--other-stack``: recorded and shown as a
replicate on another stack, never pooled, never counted toward ``[replication]``); a commit
other than the closing one (unless ``--later``, and only after the verdict: the commit must
descend from the closing one).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import UserError, plural
from harness.vocab.devices import (DeviceEnv, card_told, instance, instance_key, instance_text, model, stack,
                                        stack_differs, stack_text)
from harness.vocab.outcomes import (MISSING_KINDS, OUTCOME_KINDS, VERDICT, Coverage, MeasuredAt, Replicate, coverage,
                                         current_rows, is_replicate, latest_outcomes, measured_on, outcome_key, places,
                                         stream)
from harness.provenance.git import is_ancestor
from harness.registration.bar_syntax import And, Comparison, Not, Or
from harness.registration import bar as barlang

# The registration schema that introduced [replication].
REPLICATION_SCHEMA = 7
ALL, POOLED, WORST = "all", "pooled", "worst"
COMBINE_RULES = (ALL, POOLED, WORST)
DEFAULT_COMBINE = ALL
# Instances a registration may require, the line's own included: 1 requires no replicate;
# more than 16 cards of one model is a fleet survey, not a line's bar.
MIN_INSTANCES = 1
MAX_INSTANCES = 16
REPLICATION_KEYS = ("instances", "combine")
# Where a replicate was measured against the verdict's commit (its rows' ``replicate.at``).
AT_CLOSING, AT_LATER = "closing", "later"
# Its software stack against the verdict's (``replicate.stack``).
SAME_STACK, OTHER_STACK = "same", "other"
# Instances named in a refusal (the rest are counted).
MAX_NAMED_INSTANCES = 4


@dataclass(frozen=True)
class ReplicationSpec:
    """``[replication]``: the device instances a verdict waits for (the line's own included)
    and how their bars combine."""

    instances: int
    combine: str = DEFAULT_COMBINE

    @property
    def required(self) -> bool:
        """Whether the verdict waits for any replicate (more than the line's own instance)."""
        return self.instances > 1

    def as_dict(self) -> dict:
        return {"instances": self.instances, "combine": self.combine}


def parse(table: dict) -> ReplicationSpec:
    """The ``[replication]`` table; each problem one UserError (schema.py adds the table's name)."""
    extra = sorted(set(table) - set(REPLICATION_KEYS))
    if extra:
        raise UserError(f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)} (allowed: "
                        f"{', '.join(REPLICATION_KEYS)})")
    if "instances" not in table:
        raise UserError("needs instances = N: the device instances (the line's own included) the verdict waits for")
    n = table["instances"]
    if not isinstance(n, int) or isinstance(n, bool) or not MIN_INSTANCES <= n <= MAX_INSTANCES:
        raise UserError(f"instances = {n!r}: give an integer in [{MIN_INSTANCES}, {MAX_INSTANCES}], counting the "
                        f"instance the line is swept on (2: one replicate on another card or host)")
    rule = table.get("combine", DEFAULT_COMBINE)
    if rule not in COMBINE_RULES:
        raise UserError(f"combine = {rule!r}: use {', '.join(repr(r) for r in COMBINE_RULES)} (all: every "
                        f"instance's bar passes; pooled: the bar over every instance's rows; worst: each clause at "
                        f"its worst instance)")
    return ReplicationSpec(n, rule)


# --------------------------------------------------------------------------- what is replicated


@dataclass(frozen=True)
class Target:
    """What a replicate of a line measures again: the verdict (None before it), the commit and
    place its rows were measured at, their software stack, and the instances that measured them."""

    line: str
    verdict: object | None  # ledger.rows.VerdictRow
    commit: str
    where: tuple  # outcomes.measured_on of the deciding rows (no GPU name under mixed_devices)
    stack: dict
    instances: tuple[dict, ...]

    @property
    def of(self) -> int | None:
        return None if self.verdict is None else self.verdict.seq


def target(line) -> Target:
    """What ``bench replicate`` of ``line`` (governance.line.Line) replicates; refused when the
    line is not closed and its registration waits for no replicate, or has nothing one place
    measured to replicate."""
    reg = line.reg
    name = reg.line
    verdict = next((r for r in line.rows if r.kind == VERDICT), None)
    if verdict is None:
        if reg.replication is None or not reg.replication.required:
            raise UserError(f"line '{name}' is not closed: a replicate measures a decided line again on another "
                            f"device instance — run `bench verdict {name}` first (a line registered with "
                            f"[replication] instances = N waits for its replicates before its verdict)")
        outcomes = latest_outcomes(line.rows)
        deciding = [outcomes[p] for p in registered_pairs(reg) if p in outcomes]
        if not deciding:
            raise UserError(f"line '{name}' has no outcomes yet: a replicate repeats the line's sweep on another "
                            f"instance — run `bench sweep {name}` first")
    else:
        by_seq = {r.seq: r for r in line.rows}
        deciding = [by_seq[s] for s in verdict.decided_on or () if s in by_seq]
        if not deciding:
            raise UserError(f"line '{name}': its verdict (row {verdict.seq}) names no rows it decided on: there is "
                            f"nothing to replicate")
    at = places(deciding, reg.mixed_devices)
    if len(at) > 1:
        raise UserError(f"line '{name}': its outcomes were measured in {len(at)} places (commits "
                        f"{', '.join(sorted({str(w[0])[:12] for w, _ in at}))}): a replicate repeats one — finish "
                        f"`bench sweep {name}` at one commit first")
    (where, st), = at
    decided_at = MeasuredAt.from_row(verdict.measured_at) if verdict is not None else None
    if decided_at is not None and isinstance(decided_at.stack, dict):
        st = decided_at.stack  # the stack the verdict says it was decided on
    seen: dict = {}
    for r in deciding:
        seen.setdefault(instance_key(r.env or {}), instance(r.env or {}))
    return Target(name, verdict, where[0], where, st, tuple(seen.values()))


def registered_pairs(reg) -> list[tuple[str, str]]:
    """The (config, candidate) pairs a registration's verdict decides on, in grid order."""
    return [(c.key(), k) for c in reg.configs for k in reg.candidates]


def at_commit(line, tgt: Target, *, later: bool) -> str:
    """``AT_CLOSING`` when this checkout's code commit is the one the verdict decided on;
    ``AT_LATER`` with ``later`` when it descends from it; else a refusal naming the fix."""
    name, here, closing = tgt.line, line.commit, tgt.commit
    if here == closing:
        return AT_CLOSING
    if tgt.verdict is None:
        raise UserError(f"line '{name}' was measured at commit {closing[:12]} and this checkout's code is at "
                        f"{here[:12]}: the replicates its verdict waits for are measured at the line's commit (one "
                        f"verdict, one commit) — git checkout {closing[:12]} and run `bench replicate {name}` there")
    if not later:
        raise UserError(f"this checkout's code commit {here[:12]} is not {closing[:12]}, the commit line '{name}' "
                        f"was decided at: check it out (git checkout {closing[:12]}) to replicate the verdict as "
                        f"decided, or pass --later to replicate at {here[:12]}, named as a later commit")
    if not is_ancestor(line.root, closing, here):
        raise UserError(f"--later: commit {here[:12]} does not descend from {closing[:12]}, the commit line '{name}' "
                        f"was decided at — a later commit is one whose history holds it: replicate from a checkout "
                        f"of a descendant")
    return AT_LATER


def check_instance(line, tgt: Target, envs: list[dict], at: str, *, other_stack: bool) -> dict:
    """The ``replicate`` field of the rows the replicate writes on the device ``envs`` (its
    workers' envs) reports, after every refusal: more than one device, a card that cannot be
    told from another, another model, the verdict's own instance, an instance that already
    holds rows of the line at this commit (beyond this replicate's own, which it resumes), and
    another software stack unless ``other_stack``."""
    name = tgt.line
    if len(envs) != 1:
        raise UserError(f"a replicate runs on one device instance, and {len(envs)} were picked: give one GPU "
                        f"(--gpus N)")
    env = envs[0]
    if not card_told(env):
        raise UserError(f"this GPU ({DeviceEnv.of(env).gpu}) reports neither a UUID nor a serial: its rows could not be told "
                        f"from another card's — replicate on a card NVML identifies")
    here, there = model(env), (tgt.where[1], tgt.where[2])
    if here[0] != there[0] or (not line.reg.mixed_devices and here[1] != there[1]):
        raise UserError(f"this device is {here[1] or here[0]} and line '{name}' was measured on "
                        f"{there[1] or there[0]}: a replicate runs on another instance of the same model (a line "
                        f"registered with [bar] mixed_devices = true allows another model)")
    key = instance_key(env)
    mine = instance(env)
    if key in {instance_key(i) for i in tgt.instances}:
        raise UserError(f"this device instance ({instance_text(mine)}) measured line '{name}' itself: a replicate "
                        f"runs on another card or host")
    own = stream({"of": tgt.of, "instance": mine})
    held = [r for r in line.rows if r.kind in OUTCOME_KINDS and r.commit == line.commit
            and instance_key(r.env or {}) == key and not (is_replicate(r) and stream(r.replicate) == own)]
    if held:
        rep = Replicate.from_row(held[0].replicate) if is_replicate(held[0]) else None
        what = ("the line's own sweep" if rep is None else "a replicate before the verdict" if rep.of is None
                else f"a replicate of verdict row {rep.of}")
        raise UserError(f"this device instance ({instance_text(mine)}) already holds {plural(len(held), 'row')} of "
                        f"line '{name}' at commit {line.commit[:12]} (row {held[0].seq}: {what}): a replicate "
                        f"measures an instance that has not measured this commit — run it on another card or host")
    differ = stack_differs(stack(env), tgt.stack)
    if differ and not other_stack:
        mine_s = stack_text({f: stack(env)[f] for f in differ})
        theirs = stack_text({f: tgt.stack[f] for f in differ})
        raise UserError(f"this instance's software stack differs from the one line '{name}' was decided on "
                        f"({mine_s} here, {theirs} there): rows of two stacks are never pooled — replicate where "
                        f"the stack matches, or pass --other-stack to record a replicate on another stack (shown as "
                        f"such, never pooled, never counted toward [replication])")
    return {"of": tgt.of, "closing_commit": tgt.commit, "at": at, "instance": mine,
            "stack": OTHER_STACK if differ else SAME_STACK}


# --------------------------------------------------------------------------- replicate grids


@dataclass(frozen=True)
class Grid:
    """One replicate's rows: the latest current outcome per pair it measured, on one instance,
    for one verdict (``of``; None: before it), at one commit."""

    instance: dict
    of: int | None
    commit: str
    at: str
    stack: str  # SAME_STACK | OTHER_STACK, as the replicate recorded it
    rows: dict  # (config_key, candidate) -> outcome row

    @property
    def label(self) -> str:
        return instance_text(self.instance)

    def deciding(self, pairs: list) -> list:
        return [self.rows[p] for p in pairs if p in self.rows]

    def missing(self, pairs: list) -> list:
        return [p for p in pairs if p not in self.rows]


def grids(rows, *, of=...) -> list[Grid]:
    """Every replicate's grid in ``rows`` (with ``of``: only those replicating that verdict
    row; None: before the verdict), in the order each first appears."""
    groups: dict = {}
    for r in current_rows(rows):
        if r.kind not in OUTCOME_KINDS or not is_replicate(r):
            continue
        rep = Replicate.from_row(r.replicate)
        if of is not ... and rep.of != of:
            continue
        k = (stream(r.replicate), r.commit)
        if k not in groups:
            groups[k] = Grid(dict(rep.instance or {}), rep.of, r.commit, rep.at, rep.stack, {})
        groups[k].rows[outcome_key(r)] = r
    return list(groups.values())


def unusable(reg, grid: Grid, pairs: list) -> str | None:
    """Why a replicate's grid cannot count toward the verdict (None: it can): pairs without an
    outcome, pairs never measured (unless ``allow_missing``), fewer decided than ``min_coverage``."""
    missing = grid.missing(pairs)
    if missing:
        return f"{len(pairs) - len(missing)} of {len(pairs)} pairs"
    deciding = grid.deciding(pairs)
    never = [r for r in deciding if r.kind in MISSING_KINDS]
    if never and not reg.allow_missing:
        return f"{plural(len(never), 'pair')} never measured"
    cov = Coverage.from_row(coverage(deciding, include_noisy=reg.include_noisy))
    if cov.fraction < reg.min_coverage:
        return f"{cov.decided} of {cov.pairs} pairs decided"
    return None


def waited_for(reg, rows, deciding: list, where: tuple, at_stack: dict) -> list[Grid]:
    """The replicates a ``[replication]`` verdict combines: grids written before the verdict, at
    the line's commit and place, on its software stack, of instances other than the line's own,
    complete (``unusable``). Refused, naming the instances there and the command to run, while
    fewer than ``instances`` (the line's own counted) are."""
    spec = reg.replication
    pairs = registered_pairs(reg)
    own = {instance_key(r.env or {}) for r in deciding}
    usable, short = [], []
    for g in grids(rows, of=None):
        if g.stack == OTHER_STACK or instance_key(g.instance) in own:
            continue
        rows_g = g.deciding(pairs)
        if any(measured_on(r, reg.mixed_devices) != where for r in rows_g):
            continue  # another commit (the line was swept again since): not this verdict's
        if len(places([*deciding, *rows_g], reg.mixed_devices)) > 1:
            continue  # another software stack: never pooled
        why = unusable(reg, g, pairs)
        (short if why else usable).append((g, why))
    have = 1 + len(usable)
    if have >= spec.instances:
        return [g for g, _ in usable]
    names = [f"{instance_text(instance(deciding[0].env or {}))} (its sweep)"] + [g.label for g, _ in usable]
    shown = ", ".join(names[:MAX_NAMED_INSTANCES]) + (f" and {len(names) - MAX_NAMED_INSTANCES} more"
                                                      if len(names) > MAX_NAMED_INSTANCES else "")
    partial = "; incomplete: " + ", ".join(f"{g.label} ({why})" for g, why in short[:MAX_NAMED_INSTANCES]) \
        if short else ""
    need = spec.instances - have
    raise UserError(f"line '{reg.line}' waits for {spec.instances} device instances ([replication] instances = "
                    f"{spec.instances}, combine = \"{spec.combine}\") and has {have} with a complete grid at commit "
                    f"{str(where[0])[:12]}: {shown}{partial} — run `bench replicate {reg.line}` on "
                    f"{need} other {'card or host' if need == 1 else 'cards or hosts'} at that commit, then the verdict")


# --------------------------------------------------------------------------- combining instances


def polarity(bar) -> list[bool]:
    """Per clause of ``bar`` (in clause order): True when the bar wants it true (under an even
    number of ``not``), False under an odd number."""
    out: dict[int, bool] = {}

    def walk(node, positive: bool) -> None:
        if isinstance(node, Comparison):
            out[node.index] = positive
        elif isinstance(node, (And, Or)):
            for n in node.operands:
                walk(n, positive)
        elif isinstance(node, Not):
            walk(node.operand, not positive)

    walk(bar.root, True)
    return [out[c.index] for c in bar.clauses()]


def worst_of(outcomes: list, positive: bool = True):
    """The clause outcome (bar.ClauseOutcome) of ``outcomes`` — one clause's, one per instance —
    least favourable to the bar: an unknown one (no value) first; for an ordering the least
    (``>=``, ``>``) or greatest (``<=``, ``<``) value, the other way for a clause the bar wants
    false (``positive`` False); for ``==`` / ``!=`` a failing one (passing, when wanted false)."""
    unknown = [o for o in outcomes if o.value is None]
    if unknown:
        return unknown[0]
    op = outcomes[0].op
    if op in (">=", ">", "<=", "<"):
        low = op in (">=", ">")
        pick = min if low == positive else max
        return pick(outcomes, key=lambda o: o.value)
    against = [o for o in outcomes if o.passed != positive]
    return against[0] if against else outcomes[0]


@dataclass(frozen=True)
class Combined:
    passed: bool
    clauses: tuple  # bar.ClauseOutcome per clause, as the rule combines them
    primary_value: float | None
    record: dict  # the verdict row's ``replication``


def combined(reg, per_instance: list[tuple[dict, list[int], list[dict]]]) -> Combined:
    """The bar over several instances' bar rows (``per_instance``: (instance, the seqs decided
    on, bar rows), the line's own first) by ``[replication] combine``:

    - ``all``: GO needs every instance's bar to pass; each clause shows its worst instance
      value (``worst_of``) and passes when it passed on every instance; the primary is the
      line's own instance's;
    - ``pooled``: the bar and the primary evaluated once over every instance's rows together;
    - ``worst``: each clause at its worst instance value, the bar combined from those
      (three-valued, as ``bar.evaluate``); the primary is the line's own instance's.

    The record keeps each instance's clause values, primary and bar."""
    rule = reg.replication.combine
    each = [barlang.evaluate(reg.bar, rows) for _, _, rows in per_instance]
    primaries = [barlang.evaluate_aggregate(reg.primary_aggregate, rows) for _, _, rows in per_instance]
    if rule == POOLED:
        pooled = [row for _, _, rows in per_instance for row in rows]
        out = barlang.evaluate(reg.bar, pooled)
        passed, clauses = out.passed, out.clauses
        primary = barlang.evaluate_aggregate(reg.primary_aggregate, pooled)
    else:
        wants = polarity(reg.bar)
        clauses = []
        for i, want in enumerate(wants):
            per = [o.clauses[i] for o in each]
            w = worst_of(per, want)
            if rule == ALL:
                w = barlang.ClauseOutcome(w.text, w.value, w.op, w.threshold, all(o.passed for o in per), w.n, w.note)
            clauses.append(w)
        clauses = tuple(clauses)
        if rule == ALL:
            passed = all(o.passed for o in each)
        else:
            passed = barlang.combine(reg.bar, [None if c.value is None else c.passed for c in clauses]) is True
        primary = primaries[0]
    record = {"instances": reg.replication.instances, "combine": rule, "per_instance": [
        {"instance": inst, "original": i == 0, "decided_on": sorted(seqs),
         "clauses": [{"text": c.text, "value": c.value, "passed": c.passed, "n": c.n} for c in o.clauses],
         "primary_value": p, "passed": o.passed}
        for i, ((inst, seqs, _), o, p) in enumerate(zip(per_instance, each, primaries))]}
    return Combined(passed, clauses, primary, record)
