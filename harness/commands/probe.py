"""One config of a registration measured at this checkout: the plumbing `bench bisect` runs in
each probed commit's own worktree (``bench probe``, hidden from the help).

The sweep's stages unchanged (``run_config``: memory budget, float64 gate, interleaved timing
against the baseline with its control, the checks after timing), on this checkout's code, under
the device lock; nothing is written to any ledger. The answer is one plain dict (printed as one
JSON object): the commit that ran, where its code came from, the gate's outcome, and the raw
paired samples behind the speedup, so the caller can pool several measurements of one commit.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
import harness
from harness.execution.devicelock import device_lock
from harness.provenance import git as gitguard
from harness.registration import schema as registration_mod
from harness.vocab.devices import device_key
from harness.governance.line import require_tracked_code
from harness.measurement.device import detect_device, env_summary
from harness.pipeline.context import SweepContext
from harness.pipeline.run import run_config
from harness.ledger.payloads import Gate, Measurement, Metrics, by_role
from harness.vocab.outcomes import RESULT, transient
from harness.measurement.timing.results import ARM_BASELINE, arm_name

# The probe's JSON format; a caller refuses an answer of another format as unreadable.
PROBE_FORMAT = 1


def probe(registration: Path, config_key: str, candidate: str, device: str, root: Path | None = None) -> dict:
    """Measure ``candidate`` against the registration's baseline at ``config_key`` (a full key of
    the registration's grid) with this checkout's code; refuses (UserError) a dirty tree,
    untracked code, an unknown config or candidate."""
    tree = gitguard.require_clean(root)
    require_tracked_code(tree.root)  # the code that runs is this commit's, from source
    reg = registration_mod.load(registration)
    cfg = next((c for c in reg.configs if c.key() == config_key), None)
    if cfg is None:
        raise UserError(f"config {config_key} is not in the grid of {registration.name}: give one of its full keys")
    if candidate not in reg.candidates:
        raise UserError(f"candidate {candidate!r} is not one of {registration.name}'s: give one of "
                        f"{', '.join(reg.candidates)}")
    dev = detect_device() if device == "auto" else device
    env = env_summary(dev)
    ctx = SweepContext(reg=reg, device=dev, ceilings=None, root=str(tree.root))
    with device_lock(device_key(env), who={"line": reg.line, "root": str(tree.root)}, wait=True):
        outcomes = run_config(cfg, (candidate,), ctx)
    row = next((o for o in outcomes if o.row.candidate == candidate and not o.row.is_baseline), outcomes[0])
    return {"probe": PROBE_FORMAT, "commit": gitguard.head_commit(tree.root), "harness_version": harness.__version__,
            "code_root": str(Path(harness.__file__).resolve().parent.parent), "config_key": config_key,
            "candidate": candidate, "baseline": reg.baseline, "env": env, **measured(row)}


def measured(row) -> dict:
    """What a probe reports of the candidate's outcome row: its kind, why it has no number
    (anything but a result) and whether that may pass (``transient``), whether each role
    passed the float64 gate, and for a result the speedup, its CI and the raw interleaved
    samples of both arms (ms, round by round)."""
    r = row.row
    if r.kind == RESULT:
        gates = {role: Gate.from_row(by_role(r.gate, role)) for role in ("candidate", "baseline")}
        passed = {role: bool(g is not None and g.passed) for role, g in gates.items()}
    else:  # a rejection's gate is its own role's
        passed = {r.role or "candidate": Gate.from_row(r.gate).passed if r.gate else None}
    # transient: worth measuring again (clocks throttled, memory short, timing cut short)
    out = {"outcome": r.kind, "reason": r.reason, "tag": r.tag, "gate": passed, "transient": transient(r)}
    if r.kind != RESULT:
        return out
    m, timing = Metrics.from_row(r.metrics), Measurement.from_row(r.timing)
    return {**out, "speedup": m.speedup, "ci": [m.speedup_ci_low, m.speedup_ci_high],
            "control": m.control, "rig_noisy": bool(r.rig_noisy),
            "samples": {"baseline": timing.arm(ARM_BASELINE).samples_ms,
                        "candidate": timing.arm(arm_name(r.candidate)).samples_ms}}
