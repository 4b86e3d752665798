"""Device ceilings as ledger rows: measured once per device fingerprint, reused after.

They live in ``ledger/_device_ceilings.jsonl`` (line ids cannot start with '_', so no
registration can collide with it) and are re-measured when the GPU, driver, CUDA or
torch version changes. They are part of the record: a row is committed when it is
measured (``bench ceilings``, or the sweep before its first config runs), outcome rows name
the row they used (``ceilings_ref``, harness/pipeline/rows.py), and ``ledger verify`` checks that link.

The commit is what vouches for a row: a row no commit holds may have been edited and its chain
re-hashed since it was measured, which the chain cannot show. So a command uses a stored row
only once a commit holds it (and its datasheet allows it: ``measurement.ceilings.implausible``),
measures the device itself otherwise, and commits no row it did not measure: while rows no
commit holds stand in the file, a committing command refuses before any work (committing its
own row would commit them too), naming them and the fix.
"""

from __future__ import annotations

from pathlib import Path

from harness import __version__
from harness.errors import UserError
from harness.vocab.devices import Fingerprint, ceilings_name
from harness.ledger.store import Ledger, committed_rows, require_anchorable, rows_text
from harness.ledger.format import CEILINGS_LEDGER, ceilings_where
from harness.ledger.rows import CeilingsRow
from harness.vocab.outcomes import CEILINGS
from harness.commands.writer import write
from harness.execution.devicelock import device_lock
from harness.vocab.devices import device_key
from harness.measurement.ceilings import Ceilings, device_fingerprint, implausible, measure_ceilings
from harness.measurement.device import env_summary
from harness.commands.interrupts import StopNow, interrupts
from harness.provenance import git as gitguard
from harness.ledger.verify import verify, verify_refusal


def ceilings_command(root: Path, device: str, *, force: bool = False, why: str | None = None,
                     on_wait=None) -> tuple[CeilingsRow, bool, str | None]:
    """`bench ceilings`: this device's stored ceilings row, or one measured now (in this
    process) while the device is locked against sweeps, appended and — with ``why`` —
    committed as one step a signal waits for. Returns (row, measured now, commit or None)."""
    import signal

    env = env_summary(device)
    fp = device_fingerprint(device)
    stopped = out = None
    with interrupts(None) as guard:
        try:
            with device_lock(device_key(env), who={"line": "(bench ceilings)", "root": str(root)}, wait=True,
                             on_wait=on_wait):
                out = stored_or_measured(root, fp, env, lambda: measure_ceilings(device).to_row(), force=force,
                                         why=why, guard=guard)
        except StopNow:
            stopped = guard.signal
    if stopped is not None:
        signal.raise_signal(stopped)
    return out


def stored_or_measured(root: Path, fingerprint: dict, env: dict, measure, *, force: bool = False,
                       why: str | None = None, guard=None) -> tuple[CeilingsRow, bool, str | None]:
    """The device's latest ceilings row when a commit holds it, or ``measure()`` appended now (a
    command's process or a sweep's worker measures) and, with ``why``, committed. A stored row
    no commit holds is never used; with ``why`` it refuses the command (module doc). Returns
    (row, measured now, commit or None)."""
    held = _vouched(root, refuse_unheld=why is not None)
    row = None if force else stored_ceilings(root, fingerprint)
    if row is not None and row.seq < held:
        _require_plausible(row)
        return row, False, None
    Ledger(root, CEILINGS_LEDGER).require_writable()  # refuse before minutes of measuring, not after
    row, made = store_ceilings(root, fingerprint, env, measure(), why=why, guard=guard)
    return row, True, made


def _vouched(root: Path, *, refuse_unheld: bool) -> int:
    """How many ceilings rows HEAD holds, once the file verifies (chain and git history: a row
    HEAD holds is the row committed); with ``refuse_unheld``, refused while any row is not
    committed."""
    led = Ledger(root, CEILINGS_LEDGER)
    if not led.path.exists():
        return 0
    res = verify(led.path)
    if not res.ok:
        raise UserError(verify_refusal(led.rel, res, "bench uses or adds ceilings"))
    rows, held = led.rows(), committed_rows(led)
    if refuse_unheld and len(rows) > held:
        at_head = gitguard.show_file(root, "HEAD", led.rel) is not None
        it = "it" if len(rows) - held == 1 else "them"
        raise UserError(
            f"{led.rel} {rows_text(held, len(rows) - 1)} not committed: bench did not measure {it} in this "
            f"command, and a row no commit holds may have been edited and re-hashed since (the chain cannot "
            f"show it), so bench neither uses nor commits {it} — drop {it} "
            f"({f'git checkout HEAD -- {led.rel}' if at_head else f'rm {led.rel}'}) and run the command again "
            f"to measure the device, or, if you vouch for {it} (a --no-commit run of yours measured {it}), commit "
            f"{it} yourself (git add {led.rel} && git commit -m 'ceilings' -- {led.rel})")
    return held


def _require_plausible(row: CeilingsRow) -> None:
    """Refuse a stored row its device's datasheet rules out (measurement.ceilings.implausible)."""
    why = implausible(Ceilings.from_row(row))
    if why:
        raise UserError(f"{ceilings_where(row)} cannot be {ceilings_name(row)}'s ceilings: {why} — measure them "
                        f"again (bench ceilings --force)")


def stored_ceilings(root: Path, fingerprint: dict) -> CeilingsRow | None:
    """The latest ceilings row measured on a device with this fingerprint, or None."""
    for row in reversed(Ledger(root, CEILINGS_LEDGER).rows()):
        if row.fingerprint == fingerprint:
            return row
    return None


def append_ceilings(root: Path, fingerprint: dict, env: dict, measured: dict) -> CeilingsRow:
    """Store ceilings measured on the device ``env`` describes (by a worker, or in-process)."""
    return store_ceilings(root, fingerprint, env, measured)[0]


def store_ceilings(root: Path, fingerprint: dict, env: dict, measured: dict, *, why: str | None = None,
                   guard=None) -> tuple[CeilingsRow, str | None]:
    """``append_ceilings``, and with ``why`` its commit, as one step under ``guard``'s shield."""
    impossible = implausible(Ceilings.from_row({"fingerprint": fingerprint, **measured}))
    if impossible:
        raise UserError(f"the ceilings just measured on {Fingerprint.of(fingerprint).name} were not stored: {impossible}, "
                        f"so the timer or the device's name is wrong — check the GPU (nvidia-smi) and measure "
                        f"again (bench ceilings --force)")
    led = Ledger(root, CEILINGS_LEDGER)
    led.require_writable()
    rows, made, _ = write(led, [(CEILINGS, {"commit": gitguard.code_commit(root), "harness_version": __version__,
                                         "env": env, "fingerprint": fingerprint, **measured})], why=why, guard=guard)
    return rows[0], made


def require_committable(root: Path) -> None:
    """Refuse before any work where a ceilings row could not be committed, or where committing
    one would commit rows bench did not measure (``_vouched``)."""
    require_anchorable(Ledger(root, CEILINGS_LEDGER))
    _vouched(root, refuse_unheld=True)


def is_committed(root: Path, row: CeilingsRow) -> bool:
    """True when the ceilings ``row`` is committed at HEAD."""
    return row.seq < committed_rows(Ledger(root, CEILINGS_LEDGER))
