"""Device ceilings as ledger rows: measured once per device fingerprint, reused after.

They live in ``ledger/_device_ceilings.jsonl`` (line ids cannot start with '_', so no
registration can collide with it) and are re-measured when the GPU, driver, CUDA or
torch version changes.
"""

from __future__ import annotations

from pathlib import Path

from harness import __version__
from harness.governance.ledger import Ledger

CEILINGS_LEDGER = "_device_ceilings"


def current_ceilings(root: Path, *, device: str | None = None, force: bool = False) -> tuple[dict, bool]:
    """The stored ceilings row matching this device, measuring and appending one if needed."""
    from harness.governance import gitguard
    from harness.measurement.ceilings import device_fingerprint, measure_ceilings
    from harness.measurement.device import detect_device, env_summary

    device = device or detect_device()
    fp = device_fingerprint(device)
    led = Ledger(root, CEILINGS_LEDGER)
    if not force:
        for row in reversed(led.rows()):
            if row.get("fingerprint") == fp:
                return row, False
    led.require_writable()
    commit = gitguard.code_commit(root)
    ceil = measure_ceilings(device)
    row = led.append("ceilings", {"commit": commit, "harness_version": __version__, "env": env_summary(device),
                                  "fingerprint": fp, **ceil.to_row()})
    return row, True
