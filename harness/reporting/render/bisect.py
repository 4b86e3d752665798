"""What `bench bisect` prints: a line per commit measured as its row is written, then how the
bisect ended — the first bad commit with the evidence, "no regression", or "unclear between
A and B" — and `bench probe`'s one JSON object."""

from __future__ import annotations

import json
import sys
from harness.jsonsafe import jsonable
from harness.errors import plural
from harness.governance.bisect import FIRST_BAD, INTERRUPTED, NO_REGRESSION
from harness.reporting.render.formats import emit


def emit_probe(answer: dict) -> None:
    """The plumbing's answer: one JSON object on one line of stdout (strict JSON)."""
    sys.stdout.write(json.dumps(jsonable(answer), sort_keys=True) + "\n")


def _commit(sha: str, subject: str = "") -> str:
    return f"{sha[:12]} {subject}".rstrip()


def _figure(p) -> str:
    if p.estimate is None:
        return "no number"
    e = p.estimate
    return f"speedup {e.shown()} (n {e.n}, {e.measurements} measurement{'s' if e.measurements != 1 else ''})"


def render_probe(p) -> None:
    """One commit measured (its row written)."""
    print(f"  {p.role:<8} {_commit(p.commit, p.subject)} — {_figure(p)}: {p.decision} ({p.reason})", flush=True)


def render_probe_note(p) -> None:
    """``render_probe`` on stderr: beside `--format json`, stdout holds only the document."""
    print(f"  {p.role:<8} {_commit(p.commit, p.subject)} — {_figure(p)}: {p.decision} ({p.reason})", flush=True,
          file=sys.stderr)


def _probe_record(p) -> dict | None:
    if p is None:
        return None
    return {"commit": p.commit, "subject": p.subject, "role": p.role, "decision": p.decision, "reason": p.reason,
            "estimate": None if p.estimate is None else p.estimate.as_dict()}


def bisect_document(res) -> dict:
    """`bench bisect --format json`: how it ended (``outcome``, its ``exit_code``), the first bad
    commit and the last good one with their pooled speedups, every commit measured, and where
    the rows are."""
    return {"line": res.line, "config": res.config_key, "candidate": res.candidate, "baseline": res.baseline,
            "good": res.good, "bad": res.bad, "commits": res.n_commits, "outcome": res.outcome, "why": res.why,
            "exit_code": res.exit_code, "first_bad": _probe_record(res.first_bad),
            "last_good": _probe_record(res.last_good), "between": list(res.between) if res.between else None,
            "probes": [_probe_record(p) for p in res.probes], "skipped": [_probe_record(p) for p in res.skipped],
            "ledger": res.ledger, "committed": res.committed}


def emit_bisect(res) -> None:
    """``bisect_document`` on stdout, strict JSON (NaN spelled "NaN")."""
    emit("json", [], bisect_document(res))


def render_bisect(res) -> None:
    """How the bisect ended, with the evidence and where its rows are."""
    rows = f"{plural(len(res.probes), 'probe')}, rows in {res.ledger}" + ("" if res.committed else " (not committed: "
                                                                         "--no-commit)")
    if res.outcome == FIRST_BAD:
        fb, lg = res.first_bad, res.last_good
        print(f"first bad commit: {_commit(fb.commit, fb.subject)}")
        print(f"  last good {_commit(lg.commit, lg.subject)}: speedup {lg.estimate.shown()}")
        print(f"  first bad {_commit(fb.commit, fb.subject)}: speedup {fb.estimate.shown()} "
              f"({1 - fb.estimate.speedup / lg.estimate.speedup:.1%} slower)")
    elif res.outcome == INTERRUPTED:
        print(f"interrupted after {plural(len(res.probes), 'commit')} measured: no first bad commit yet")
    elif res.outcome == NO_REGRESSION:
        print(f"no regression between {res.good[:12]} and {res.bad[:12]}: {res.why}")
    else:
        a, b = res.between
        print(f"unclear between {a[:12]} and {b[:12]}: {res.why}")
        for p in res.skipped:
            print(f"  {p.decision} {_commit(p.commit, p.subject)}: {p.reason}")
    print(rows)
