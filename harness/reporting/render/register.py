"""What `bench register` prints: the registered line, its tolerance checks and its reductio."""

from __future__ import annotations

from harness.errors import plural
from harness.ledger.payloads import CeilingsRef, each
from harness.ledger.line_payloads import (AmdahlCeiling, Reductio, ReductioDevice, RegistrationSummary,
                                          TimingResolution, ToleranceFloor, TolerancePower)
from harness.reporting.render.console import console
from harness.governance.power import ceil_sig
from harness.registration.integration import ceiling_text


def render_registered(row: dict) -> None:
    """The registered row: identity, bar, and what the line can tell apart (governance.power)."""
    from rich.markup import escape

    c = console()
    c.print(f"registered line [bold]{row.line}[/] — sha256 {row.registration_sha256[:12]}, "
            f"commit {row.registration_commit[:12]}, {plural(row.n_configs, 'config')}; "
            f"bar: {escape(RegistrationSummary.from_row(row.registration).go)}")
    for dt, held in sorted((row.tolerance_floor or {}).items()):
        f = ToleranceFloor.from_row(held)
        if f.unchecked:
            c.print(f"  tolerance floor, {dt}: not checked ({f.unchecked})")
            continue

        c.print(f"  tolerance floor, {dt}: the reference rounded to the nearest {dt} needs atol >= "
                f"{ceil_sig(f.need_atol):g} at rtol {f.rtol:g} (registered atol {f.atol:g}) on "
                f"{', '.join(f.configs)}, |ref| up to {max(f.magnitude.values()):.3g}")
    power = TolerancePower.from_row(row.tolerance_power or {})
    checks = power.checks if power.has("canaries") else []
    if checks:
        n_rej = sum(ch.rejected for ch in checks)
        c.print(f"  tolerance power: {n_rej} of {len(checks)} canary checks rejected"
                + (f"; waived (accept_weak): {', '.join(power.accepted_weak)}" if power.accepted_weak else ""))
    for what, seen in sorted((power.downgrades or {}).items()):
        c.print(f"  precision {what}: {seen}")
    _render_reductio(c, row.reductio or {})
    if row.timing_resolution:
        res = TimingResolution.from_row(row.timing_resolution)
        c.print(f"  smallest resolvable speedup ({res.mode} mode): {res.resolvable_speedup:.3f}"
                + (f" (control spread on {', '.join(res.devices)})" if res.devices
                   else f" (no recorded control spread: the control tolerance {res.control_tolerance:g})"))
        for w in (res.warnings if res.has("warnings") else []):
            c.print(f"  [yellow]warning[/]: {w}")


def _render_reductio(c, red: dict) -> None:
    """What the registered bar was checked against (governance.reductio), and any waiver."""
    from rich.markup import escape

    red = Reductio.from_row(red)
    waived = red.waived or []
    for d in each(ReductioDevice, red.checked if red.has("checked") else []):
        c.print(f"  reductio: checked against {escape(d.device)} (ceilings row {CeilingsRef.from_row(d.ceilings_ref).seq}, "
                f"{plural(d.baseline_times, 'recorded baseline time')})")
    for d in each(ReductioDevice, red.not_checked if red.has("not_checked") else []):
        c.print(f"  reductio: not checked against {escape(d.device)}: {escape(d.why)}")
    if red.note:
        c.print(f"  [yellow]note[/]: {escape(red.note)}")
    if red.amdahl:
        a = AmdahlCeiling.from_row(red.amdahl)
        c.print(escape(f"  amdahl: {ceiling_text(a.op_share, a.op_share_source)}: an integration bar above "
                       f"it was refused; a measured gain above it marks the line amdahl_violated"))
    if red.beyond_ceiling_ok:
        what = f"it would refuse: {waived[0]}" if waived else "nothing known is beyond a ceiling"
        c.print(escape(f"  reductio waived ([bar] beyond_ceiling_ok = {red.beyond_ceiling_ok!r}): {what}"))
