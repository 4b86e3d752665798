"""`bench bisect`: the first commit at which a line's candidate regressed at one config.

Each probed commit is checked out in a detached worktree of its own (a temporary directory,
removed afterwards) and measured by that worktree's own code: ``python -m harness probe``
run as a subprocess with the worktree as its working directory and no PYTHONPATH, so it
imports that commit's harness and kernels, never this checkout's (the probe reports where
its code came from, and an answer from anywhere else is refused). The probe is the sweep's
config run (float64 gate, then interleaved timing against the baseline; commands/probe.py)
for the line's registration as registered here, so every commit is held to one protocol.

The good and bad ends are measured first, then commits in between by halving the range
(governance/bisect.py says what each measurement decides). Every commit measured is one
`probe` row of ``ledger/_bisect.jsonl`` (``BISECT_LEDGER``), committed after each probe
unless ``commit`` is off. Commits that change only ``ledger/`` are not probed: their code
is their parent's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError
from harness.governance import bisect as rule
from harness.governance.bisect import FIRST_BAD, INTERRUPTED, NO_REGRESSION, UNCLEAR
from harness.provenance import git as gitguard
from harness.ledger.store import Ledger, require_anchorable
from harness.ledger.format import BISECT_LEDGER, utc_now
from harness.vocab.outcomes import PROBE, RESULT
from harness.commands.interrupts import StopNow, interrupts
from harness.commands.writer import write
from harness.governance.line import read_line
from harness.registration.line_ids import config_of
from harness.ledger.verify import verify, verify_refusal
from harness.commands.probe import PROBE_FORMAT
from harness.jsonsafe import number
from harness.ledger.line_payloads import BisectRun, ProbeAnswer

# One probe's subprocess (its gate and timing of one config) is given this long before it is
# killed and its commit skipped.
PROBE_TIMEOUT_S = 900
# Environment variables that would make a probe import code from somewhere other than its
# worktree (or run something before it): removed from the probe's environment.
FOREIGN_CODE_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONUSERBASE")
GOOD_END, BAD_END, PROBED = "good end", "bad end", "probe"


@dataclass(frozen=True)
class Probe:
    """One commit measured: what the ledger row holds, in plain fields."""

    commit: str
    subject: str
    role: str
    decision: str
    reason: str
    estimate: rule.Estimate | None
    row: dict  # the `probe` row as written


@dataclass
class BisectResult:
    """How a bisect ended (``outcome``: FIRST_BAD, NO_REGRESSION or UNCLEAR) and the evidence."""

    line: str
    config_key: str
    candidate: str
    baseline: str
    good: str
    bad: str
    n_commits: int  # code commits after good, up to bad
    outcome: str = UNCLEAR
    why: str = ""
    probes: list[Probe] = field(default_factory=list)
    last_good: Probe | None = None
    first_bad: Probe | None = None
    between: tuple[str, str] | None = None  # UNCLEAR: (last good, first bad) commits
    skipped: list[Probe] = field(default_factory=list)  # unclear or unmeasurable commits in between
    ledger: str = f"ledger/{BISECT_LEDGER}.jsonl"
    committed: bool = True
    signal: int | None = None  # INTERRUPTED: the signal (SIGINT, SIGTERM) that stopped it

    @property
    def exit_code(self) -> int:
        """0: first bad or no regression; 1: unclear (an interrupted bisect ends as its signal)."""
        return 1 if self.outcome == UNCLEAR else 0


@dataclass(frozen=True)
class BisectPlan:
    """What a bisect searches: the line and config, the good and bad ends (commit-ish),
    ``candidate`` (None: the line's only one), ``budget`` (measurements pooled at one commit
    while it is unclear) and ``threshold`` (the relative slowdown that counts)."""

    line: str
    config: str
    good: str
    bad: str
    candidate: str | None = None
    budget: int = rule.DEFAULT_BUDGET
    threshold: float = rule.DEFAULT_THRESHOLD


def bisect(plan: BisectPlan, *, device: str = "auto", commit: bool = True, root: Path | None = None,
           on_probe=None) -> BisectResult:
    """Find the first code commit after the plan's good end up to its bad end at which its
    candidate's speedup over the baseline at its config dropped (governance/bisect.py's rule).
    Every refusal comes before the first probe; ``on_probe(Probe)`` is called as each row is
    written."""
    line, config, good, bad = plan.line, plan.config, plan.good, plan.bad
    candidate, budget, threshold = plan.candidate, plan.budget, plan.threshold
    if budget < 1:
        raise UserError(f"--budget {budget}: give the measurements one commit may take, at least 1")
    if not 0 <= threshold < 1:
        raise UserError(f"--threshold {threshold}: give the relative slowdown that counts, in [0, 1), e.g. 0.05")
    ln = read_line(line, root=root, action="a bisect")
    reg, top = ln.reg, ln.root
    cfg = config_of(reg, config)
    if candidate is None:
        if len(reg.candidates) != 1:
            raise UserError(f"line '{reg.line}' has {len(reg.candidates)} candidates ({', '.join(reg.candidates)}): "
                            f"name one with --candidate")
        candidate = reg.candidates[0]
    elif candidate not in reg.candidates:
        raise UserError(f"--candidate {candidate!r} is not a candidate of line '{reg.line}': name one of "
                        f"{', '.join(reg.candidates)}")
    good_sha = gitguard.resolve_commit(top, good, "--good")
    bad_sha = gitguard.resolve_commit(top, bad, "--bad")
    if good_sha == bad_sha:
        raise UserError(f"--good and --bad are the same commit ({good_sha[:12]}): give a good commit older than "
                        f"the bad one")
    commits = gitguard.code_commits_between(top, good_sha, bad_sha)
    if not commits:
        raise UserError(f"no commit after --good {good_sha[:12]} up to --bad {bad_sha[:12]} changes anything outside "
                        f"ledger/: their code is the same, there is nothing to bisect (give a --good from before the "
                        f"change you suspect)")
    led = Ledger(top, BISECT_LEDGER)
    if led.exists():  # a broken chain, or rows of a newer bench, refused before any probe

        checked = verify(led.path)
        if not checked.ok:
            raise UserError(verify_refusal(led.rel, checked, "a bisect"))
    led.require_writable()
    if commit:
        require_anchorable(led)
    run = BisectRun(line=reg.line, config_key=cfg.key(), candidate=candidate, baseline=reg.baseline, good=good_sha,
                    bad=bad_sha, by=ln.commit, started=utc_now(), budget=budget, threshold=threshold)
    res = BisectResult(reg.line, cfg.key(), candidate, reg.baseline, good_sha, bad_sha, len(commits),
                       committed=commit)
    # A Ctrl-C or SIGTERM stops it at once, but never between a row's append and its commit;
    # the worktree in use is removed on the way out, and the rows written stay.
    with interrupts(None) as guard, tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        reg_copy = Path(tmp) / f"{reg.line}.toml"  # the registration as registered (its SHA-256 checked)
        reg_copy.write_bytes(reg.path.read_bytes())
        prober = _Prober(top, Path(tmp), reg_copy, cfg.key(), candidate, device, budget)
        writer = _Rows(led, ln, run, commit, res, on_probe, guard)
        try:
            _search(prober, writer, res, good_sha, commits, threshold)
        except StopNow:
            res.outcome, res.signal = INTERRUPTED, guard.signal
        guard.wrap_up()
    return res


def _search(prober: "_Prober", rows: "_Rows", res: BisectResult, good: str, commits: list[str],
            threshold: float) -> None:
    """The ends, then halving: fills ``res``."""
    g = prober.start(good)
    if not g.ok:  # nothing to compare the rest with: the bad end is not measured
        p = rows.add(g, GOOD_END, rule.SKIP, g.why)
        res.outcome, res.between, res.last_good = UNCLEAR, (good, commits[-1]), p
        res.why = f"the {GOOD_END} could not be measured ({g.why})"
        return
    b = prober.start(commits[-1])
    verdict, why = rule.UNCLEAR, "an end could not be measured"
    while g.ok and b.ok:
        verdict, why = rule.ends(g.estimate, b.estimate, threshold)
        if verdict != rule.UNCLEAR:
            break
        if not (prober.more(g) | prober.more(b)):  # the budget is spent: not apart is no regression
            verdict, why = rule.ends(g.estimate, b.estimate, threshold, last=True)
            break
    end_decision = {rule.REGRESSION: (rule.GOOD, rule.BAD), rule.NO_REGRESSION: (rule.GOOD, rule.GOOD)}
    gd, bd = end_decision.get(verdict, (rule.UNCLEAR, rule.UNCLEAR))
    good_probe = rows.add(g, GOOD_END, gd if g.ok else rule.SKIP, why if g.ok else g.why)
    bad_probe = rows.add(b, BAD_END, bd if b.ok else rule.SKIP, why if b.ok else b.why)
    res.why = why if g.ok and b.ok else \
        "; ".join(f"the {role} could not be measured ({m.why})" for role, m in ((GOOD_END, g), (BAD_END, b)) if not m.ok)
    if verdict == rule.NO_REGRESSION:
        res.outcome, res.last_good, res.first_bad = NO_REGRESSION, good_probe, bad_probe
        return
    if verdict != rule.REGRESSION:
        res.outcome, res.between = UNCLEAR, (good, commits[-1])
        res.last_good, res.first_bad = good_probe, bad_probe
        return
    lo, hi, skipped = -1, len(commits) - 1, set()
    found = {-1: good_probe, hi: bad_probe}
    while (i := rule.next_probe(lo, hi, skipped)) is not None:
        m = prober.start(commits[i])
        decision, why = rule.UNCLEAR, m.why
        while m.ok:
            decision, why = rule.classify(m.estimate, g.estimate, b.estimate)
            if decision != rule.UNCLEAR or not prober.more(m):
                break
        if not m.ok:  # its code cannot run the probe, or a measurement failed the gate or crashed
            decision, why = rule.SKIP, m.why
        p = rows.add(m, PROBED, decision, why)
        if decision == rule.GOOD:
            lo, found[i] = i, p
        elif decision == rule.BAD:
            hi, found[i] = i, p
        else:
            skipped.add(i)
            res.skipped.append(p)
    res.last_good, res.first_bad = found[lo], found[hi]
    if hi == lo + 1:
        res.outcome = FIRST_BAD
        res.why = (f"last good {found[lo].commit[:12]} {found[lo].estimate.shown()}, first bad "
                   f"{found[hi].commit[:12]} {found[hi].estimate.shown()}")
        return
    res.outcome, res.between = UNCLEAR, (found[lo].commit, found[hi].commit)
    res.skipped = [p for p in res.skipped if p.commit in commits[lo + 1:hi]]
    res.why = f"{hi - lo - 1} commit(s) between them could not be decided"


@dataclass
class _Measured:
    """A commit's measurements so far (``ok``: it can be measured; else ``why`` not)."""

    commit: str
    measurements: list[ProbeAnswer] = field(default_factory=list)
    attempts: int = 0  # probes run, those that gave no number included
    missed: list = field(default_factory=list)  # why transient attempts gave no number
    ok: bool = True
    why: str = ""
    answer: ProbeAnswer | None = None  # the last probe's answer

    @property
    def estimate(self) -> rule.Estimate:
        return rule.pooled(self.measurements)


class _Prober:
    """Runs probes of commits in their own worktrees (one worktree per measurement). Each
    probe counts against the commit's budget; one that gave no number for a transient reason
    (timing cut short, memory short, clocks throttled) is tried again within it, any other
    failure (the gate, a crash, code that cannot run the probe) ends the commit's measuring."""

    def __init__(self, root: Path, tmp: Path, registration: Path, config_key: str, candidate: str, device: str,
                 budget: int):
        self.root, self.tmp, self.registration = root, tmp, registration
        self.config_key, self.candidate, self.device, self.budget = config_key, candidate, device, budget
        self.n = 0

    def start(self, commit: str) -> _Measured:
        m = _Measured(commit)
        while m.ok and not m.measurements and m.attempts < self.budget:
            self._measure(m)
        if m.ok and not m.measurements:
            m.ok, m.why = False, f"{m.missed[-1]} ({m.attempts} tries)"
        return m

    def more(self, m: _Measured) -> bool:
        """Measure ``m`` once more if its budget allows; whether it was."""
        if not m.ok or m.attempts >= self.budget:
            return False
        self._measure(m)
        return True

    def _measure(self, m: _Measured) -> None:
        self.n += 1
        m.attempts += 1
        where = self.tmp / f"probe-{self.n}"
        gitguard.worktree(self.root, m.commit, where)
        try:
            answer, why = self._run(where, m.commit)
        finally:
            gitguard.remove_worktree(self.root, where)
        m.answer = answer or m.answer
        if why is None and answer.outcome != RESULT:
            tag = f" [{answer.tag}]" if answer.tag else ""
            why = f"no number: {answer.outcome}{tag}: {answer.reason}"
            if answer.transient:
                m.missed.append(why)
                return
        if why is not None:
            m.ok, m.why = False, why
            return
        m.measurements.append(answer)

    def _run(self, where: Path, commit: str) -> tuple[ProbeAnswer | None, str | None]:
        """(the probe's answer, None) or (whatever it said, why it cannot be used)."""
        env = {k: v for k, v in os.environ.items() if k not in FOREIGN_CODE_ENV}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        cmd = [sys.executable, "-m", "harness", "probe", str(self.registration), self.config_key,
               "--candidate", self.candidate, "--device", self.device]
        try:
            done = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"the probe ran past {PROBE_TIMEOUT_S} s and was killed"
        said = [x for x in (done.stderr or "").strip().splitlines() if x.strip()]
        last = said[-1].strip() if said else f"exit {done.returncode}, nothing on stderr"
        for top in {str(where.resolve()), str(where)}:  # a row names files of the commit, not of this machine
            last = last.replace(top + os.sep, "").replace(top, ".")
        if done.returncode != 0:
            return None, f"its code cannot run the probe (exit {done.returncode}): {last}"
        try:
            answer = ProbeAnswer.from_row(json.loads((done.stdout or "").strip().splitlines()[-1]))
        except (IndexError, ValueError):
            return None, f"its probe printed no JSON object: {last}"
        if answer is None or answer.probe != PROBE_FORMAT:
            return None, f"its probe answered in another format ({answer.probe if answer is not None else '?'})"
        if Path(answer.code_root or "").resolve() != where.resolve():
            return None, "its probe ran code from outside its own worktree"
        if answer.commit != commit:
            return None, f"its probe measured commit {str(answer.commit)[:12]}, not {commit[:12]}"
        return answer, None


class _Rows:
    """Appends (and commits) one `probe` row per commit measured."""

    def __init__(self, led: Ledger, ln, run: BisectRun, commit: bool, res: BisectResult, on_probe, guard):
        self.led, self.ln, self.run, self.commit, self.res, self.on_probe = led, ln, run, commit, res, on_probe
        self.guard = guard

    def add(self, m: _Measured, role: str, decision: str, why: str) -> Probe:
        est = m.estimate if m.measurements else None
        last = m.answer
        per = [{"speedup": number(a.speedup), "ci": [number(x) for x in a.ci or []], "n": a.arms.rounds,
                "control": number(a.control), "rig_noisy": a.rig_noisy} for a in m.measurements]
        subject = gitguard.subject(self.ln.root, m.commit)
        fields = {"commit": m.commit, "harness_version": last.harness_version if last else None,
                  "env": last.env if last else None,
                  "registration_sha256": self.ln.registered.registration_sha256,
                  "registration_commit": self.ln.registered.registration_commit,
                  "bisect": self.run.dump(), "config_key": self.run.config_key, "role": role, "subject": subject,
                  "speedup": est.speedup if est else None,
                  "speedup_ci_low": est.lo if est else None, "speedup_ci_high": est.hi if est else None,
                  "samples": {"n": est.n if est else 0, "measurements": per, "attempts": m.attempts,
                              "missed": m.missed}, "gate": last.gate if last else None,
                  "decision": decision, "reason": why}
        why_commit = f"bisect of {self.run.line} at {self.run.config_key}" if self.commit else None
        (row,), _, _ = write(self.led, [(PROBE, fields)], why=why_commit, guard=self.guard)
        p = Probe(m.commit, subject, role, decision, why, est, row.dump())
        self.res.probes.append(p)
        if self.on_probe is not None:
            self.on_probe(p)
        return p
