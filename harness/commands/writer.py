"""The one path rows a command measures or decides take into a ledger: outcomes, supersedes,
profiles, ceilings, verdicts.

Rows are appended (fsynced) and, unless the command runs with --no-commit, committed to git
at once (``ledger.anchor``), so an interrupted command loses at most what was in flight and
what it reported as written cannot be rewritten unnoticed. An append and its commit are one
step under the command's signal guard (``Interrupts.shielded``): a signal that arrives
meanwhile waits for both to end. The `registered` row is governance's own (the user commits it,
with the registration, before any number exists).
"""

from __future__ import annotations

import contextlib
import time
from typing import NamedTuple

from harness.errors import UserError
from harness.provenance import git as gitguard
from harness.ledger.store import Left, anchor
from harness.vocab.outcomes import INTEGRATION, PROFILE, SUPERSEDES
from harness.commands.interrupts import Interrupts
from harness.commands.plan import replaced_by


class Wrote(NamedTuple):
    rows: list  # the rows appended (typed)
    commit: str | None  # the commit holding them (None: none made)
    left: Left | None  # the file as this write left it (None: not followed, no ``left`` given)


def write(ledger, batch, *, why: str | None = None, guard: Interrupts | None = None,
          left: Left | None = None) -> Wrote:
    """Append ``batch`` ((kind, payload) pairs) to ``ledger`` and, with ``why``, commit them.
    Shielded from ``guard``'s signals.

    With ``left`` (the file as the command read it, or as its own last write left it), the file
    must still be exactly that before each append and before the commit (``Ledger.require_left``),
    and the commit must hold exactly what this write left: a kernel that writes to its own
    ledger fails the command closed, and nothing is appended to, or committed with, its bytes."""
    with guard.shielded() if guard is not None else contextlib.nullcontext():
        rows = []
        for kind, payload in batch:
            row, now = ledger.append_after(left, kind, payload)
            rows.append(row)
            left = now if left is not None else None
        if not why:
            return Wrote(rows, None, left)
        if left is not None:
            ledger.require_left(left)
        made = anchor(ledger, why)
        if made is not None and left is not None:
            _require_committed(ledger, left, made)
        return Wrote(rows, made, left)


def _require_committed(ledger, left: Left, made: str) -> None:
    """The commit ``made`` holds the ledger exactly as bench left it: bytes something else
    appended between the last check and `git add` were committed with bench's rows."""
    held = gitguard.show_file(ledger.root, made, ledger.rel) or b""
    if Left.of(held) == left:
        return
    extra = len(held) - left.size
    what = f"{extra} bytes bench did not write (at offset {left.size})" if extra > 0 else "bytes bench did not write"
    raise UserError(f"{ledger.rel}: commit {made[:12]} holds {what}, written to the ledger while bench committed it "
                    f"— something else (a kernel?) writes there: stop it, undo that commit (git reset --soft "
                    f"{made[:12]}~1), remove them (bench ledger repair {ledger.line}) and run the command again")


class Writer:
    """A command's rows into its line's ledger: what it appended, the latest outcome per
    (config, candidate), and the commits holding them (``commit``: commit as it goes, with
    the message ``why``)."""

    def __init__(self, line, guard: Interrupts | None, *, commit: bool, why: str):
        self.line, self.guard, self.commit_rows, self.why = line, guard, commit, why
        # A replicate's run (`bench replicate`): the ``replicate`` field its rows carry; it
        # supersedes only its own rows (commands/plan.replaced_by). None: the line's own sweep.
        self.replicate: dict | None = None
        self.left = line.left  # the ledger as the line was verified: appends follow it byte for byte
        self.appended: list = []
        self.latest: dict = {}
        self.anchored: list[str | None] = []
        self.costs: list[dict] = []  # each config's `cost` (pipeline/phase.py), in the order written
        self.write_s = 0.0  # seconds spent appending and committing rows

    @property
    def commits(self) -> tuple[str, ...]:
        return tuple(a for a in self.anchored if a)

    def config(self, task, rows, key: tuple, why: str) -> list[dict]:
        """One config's rows ((Outcome, env) pairs), after the `supersedes` row its re-run
        needs (``why`` says why it was run again), committed together."""
        line = self.line
        batch = []
        old = replaced_by(task, [*line.rows, *self.appended], key, line.reg.mixed_devices, self.replicate)
        mark = {"replicate": self.replicate} if self.replicate is not None else {}
        if old:
            stamp = line.stamp(rows[0][1]).fields()
            batch.append((SUPERSEDES, {
                **stamp, "config_key": task.config.key(), "supersedes": old,
                "reason": f"{why} at commit {line.commit[:12]} on {key[1]}{' ' + key[2] if key[2] else ''}", **mark}))
        batch += [(o.kind, {**line.stamp(env).fields(), **o.payload, **mark}) for o, env in rows]
        written = self._write(batch, commit=True)
        typed = [o.row for o, _ in rows]
        for (o, _), r in zip(rows, typed):
            self.latest[r.pair] = o
        cost = next((r.cost for r in typed if r.cost), None)
        if cost is not None:
            self.costs.append(cost)
        return written

    def profile(self, payload: dict, env: dict, *, commit: bool = True) -> dict:
        """One `profile` row (a harness/commands/profile.py payload) measured on ``env``'s device."""
        return self._write([(PROFILE, {**self.line.stamp(env).fields(), **payload})], commit=commit)[0]

    def integration(self, payloads: list[dict], env: dict) -> list:
        """The line's `integration` rows (commands/integration.py), measured on ``env``'s device,
        committed together."""
        return self._write([(INTEGRATION, {**self.line.stamp(env).fields(), **p}) for p in payloads], commit=True)

    def commit(self) -> None:
        """Commit what was appended and not committed yet (an earlier, interrupted run's rows too)."""
        self._write([], commit=True)

    def _write(self, batch, *, commit: bool) -> list:
        t0 = time.perf_counter()
        # The file as this write left it is kept before a signal deferred by ``write``'s shield
        # can stop the command: a later commit of the rows written holds it to them.
        with self.guard.shielded() if self.guard is not None else contextlib.nullcontext():
            rows, made, self.left = write(self.line.ledger, batch,
                                          why=self.why if commit and self.commit_rows else None, guard=self.guard,
                                          left=self.left)
        self.write_s += time.perf_counter() - t0
        self.appended += rows
        if commit and self.commit_rows:
            self.anchored.append(made)
        return rows
