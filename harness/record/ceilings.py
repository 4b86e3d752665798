"""Device ceilings as ledger rows: measured once per device fingerprint, reused after.

They live in ``ledger/_device_ceilings.jsonl`` (line ids cannot start with '_', so no
registration can collide with it) and are re-measured when the GPU, driver, CUDA or
torch version changes. They are part of the record: a row is committed when it is
measured (``bench ceilings``, or the sweep before its first config runs), outcome rows name
the row they used (``ceilings_ref``, harness/pipeline/rows.py), and ``ledger verify`` checks that link.
"""

from __future__ import annotations

from pathlib import Path

from harness import __version__
from harness.governance.ledger import Ledger, committed_rows, require_anchorable
from harness.governance.ledger_format import CEILINGS_LEDGER
from harness.governance.ledger_rows import CeilingsRow
from harness.governance.outcomes import CEILINGS
from harness.record.writer import write


def ceilings_command(root: Path, device: str, *, force: bool = False, why: str | None = None,
                     on_wait=None) -> tuple[CeilingsRow, bool, str | None]:
    """`bench ceilings`: this device's stored ceilings row, or one measured now (in this
    process) while the device is locked against sweeps, appended and — with ``why`` —
    committed as one step a signal waits for. Returns (row, measured now, commit or None)."""
    import signal

    from harness.execution.devicelock import device_lock
    from harness.governance.devices import device_key
    from harness.measurement.ceilings import device_fingerprint, measure_ceilings
    from harness.measurement.device import env_summary
    from harness.record.interrupts import StopNow, interrupts

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
    """The device's stored ceilings row, or ``measure()`` appended now (a command's process or a
    sweep's worker measures); with ``why`` committed, a stored row an earlier --no-commit left
    out included. Returns (row, measured now, commit or None)."""
    row = None if force else stored_ceilings(root, fingerprint)
    if row is None:
        Ledger(root, CEILINGS_LEDGER).require_writable()  # refuse before minutes of measuring, not after
        row, made = store_ceilings(root, fingerprint, env, measure(), why=why, guard=guard)
        return row, True, made
    return row, False, commit_ceilings(root, why, guard) if why else None


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
    from harness.governance import gitguard

    led = Ledger(root, CEILINGS_LEDGER)
    led.require_writable()
    rows, made, _ = write(led, [(CEILINGS, {"commit": gitguard.code_commit(root), "harness_version": __version__,
                                         "env": env, "fingerprint": fingerprint, **measured})], why=why, guard=guard)
    return rows[0], made


def require_committable(root: Path) -> None:
    """Refuse before any work where a ceilings row could not be committed."""
    require_anchorable(Ledger(root, CEILINGS_LEDGER))


def commit_ceilings(root: Path, why: str, guard=None) -> str | None:
    """Commit the ceilings rows HEAD does not hold yet (that file alone); the new commit, or None."""
    return write(Ledger(root, CEILINGS_LEDGER), [], why=why, guard=guard).commit


def is_committed(root: Path, row: CeilingsRow) -> bool:
    """True when the ceilings ``row`` is committed at HEAD."""
    return row.seq < committed_rows(Ledger(root, CEILINGS_LEDGER))
