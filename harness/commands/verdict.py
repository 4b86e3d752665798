"""`bench verdict`: the line's verdict (governance/verdict.py decides it) written as its
closing row and committed in one step through the one writer path, under the interrupt
shield: a Ctrl-C or SIGTERM meanwhile waits for both, so no verdict row is ever left
uncommitted (the verdict refuses uncommitted rows, its own included)."""

from __future__ import annotations

import dataclasses

from harness.ledger.store import require_anchorable
from harness.vocab.outcomes import VERDICT
from harness.governance.verdict import decide
from harness.commands.interrupts import StopNow, interrupts
from harness.commands.writer import write


def close(line, env: dict, *, dry_run: bool = False):
    """Decide the line and, unless ``dry_run``, append its `verdict` row and commit it: the
    ``Verdict`` with the row as written and the commit holding it."""
    import signal

    if not dry_run:
        require_anchorable(line.ledger)
    v = decide(line, env, dry_run=dry_run)
    if dry_run:
        return v
    stopped = written = None
    with interrupts(None) as guard:
        try:
            fields = {k: x for k, x in v.row.dump().items() if k not in ("kind", "line")}  # the writer adds both
            rows, made, _ = write(line.ledger, [(VERDICT, fields)], why=f"verdict of {line.reg.line}: {v.outcome}",
                                  guard=guard, left=line.left)  # the ledger as it was decided on
            written = dataclasses.replace(v, row=rows[0], anchored=made)
        except StopNow:
            stopped = guard.signal
    if stopped is not None:
        signal.raise_signal(stopped)
    return written
