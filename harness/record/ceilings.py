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
from harness.governance.outcomes import CEILINGS
from harness.record.writer import write


def current_ceilings(root: Path, *, device: str | None = None, force: bool = False) -> tuple[dict, bool]:
    """The stored ceilings row matching this device, measuring (in this process) and appending one if needed."""
    from harness.measurement.ceilings import device_fingerprint, measure_ceilings
    from harness.measurement.device import detect_device, env_summary

    device = device or detect_device()
    fp = device_fingerprint(device)
    row = None if force else stored_ceilings(root, fp)
    if row is not None:
        return row, False
    Ledger(root, CEILINGS_LEDGER).require_writable()  # refuse before minutes of measuring, not after
    return append_ceilings(root, fp, env_summary(device), measure_ceilings(device).to_row()), True


def stored_ceilings(root: Path, fingerprint: dict) -> dict | None:
    """The latest ceilings row measured on a device with this fingerprint, or None."""
    for row in reversed(Ledger(root, CEILINGS_LEDGER).rows()):
        if row.get("fingerprint") == fingerprint:
            return row
    return None


def append_ceilings(root: Path, fingerprint: dict, env: dict, measured: dict) -> dict:
    """Store ceilings measured on the device ``env`` describes (by a worker, or in-process)."""
    from harness.governance import gitguard

    led = Ledger(root, CEILINGS_LEDGER)
    led.require_writable()
    return write(led, [(CEILINGS, {"commit": gitguard.code_commit(root), "harness_version": __version__,
                                   "env": env, "fingerprint": fingerprint, **measured})])[0][0]


def require_committable(root: Path) -> None:
    """Refuse before any work where a ceilings row could not be committed."""
    require_anchorable(Ledger(root, CEILINGS_LEDGER))


def commit_ceilings(root: Path, why: str) -> str | None:
    """Commit the ceilings rows HEAD does not hold yet (that file alone); the new commit, or None."""
    return write(Ledger(root, CEILINGS_LEDGER), [], why=why)[1]


def is_committed(root: Path, row: dict) -> bool:
    """True when the ceilings ``row`` is committed at HEAD."""
    return row["seq"] < committed_rows(Ledger(root, CEILINGS_LEDGER))
