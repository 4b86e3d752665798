"""Renderers: the only code that prints. Everything here reads ledger rows or frozen data."""

from __future__ import annotations

from harness.errors import plural, shown
from harness.governance.outcomes import (CEILINGS, CRASHED, INCORRECT, PROFILE, REGISTERED, RESULT, SKIPPED, SUPERSEDES,
                                         THROTTLED, UNSUPPORTED, VERDICT, Remeasure)
from harness.reporting.console import console
from harness.reporting.history import MAX_LISTED


def _fmt(v, spec=".3g"):
    if v is None:
        return "—"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def outcome_reason(row: dict) -> str:
    """One readable line saying what happened to a row (the reason at a glance)."""
    kind = row["kind"]
    if kind == RESULT:
        return _result_reason(row)
    if kind == INCORRECT:
        return f"[{row.get('tag')}] {row.get('reason')}"
    if kind in (SKIPPED, UNSUPPORTED, CRASHED, THROTTLED):
        return row.get("reason", "")
    if kind == REGISTERED:
        return f"bar: {row['registration']['go']} · prediction {row['registration']['prediction']}"
    if kind == VERDICT:
        cov = row.get("coverage")
        on = f"; decided on {cov['decided']} of {cov['pairs']} pairs" if cov else ""
        return (f"{row['outcome']}: {row['primary']} = {_fmt(row.get('primary_value'), '.4g')} "
                f"(predicted {row['prediction']}){on}")
    if kind == SUPERSEDES:
        return f"supersedes rows {row.get('supersedes')}: {row.get('reason')}"
    if kind == PROFILE:
        if row.get("error"):
            return f"no counters: {row['error']}"
        k = row.get("counters") or {}
        flag = f" (impossible: {row['impossible']})" if row.get("impossible") else ""
        return (f"DRAM read {_fmt(_mb(k.get('dram_read_bytes')), '.4g')} MB, write "
                f"{_fmt(_mb(k.get('dram_write_bytes')), '.4g')} MB, {_fmt(k.get('launches'), '.0f')} launches"
                + flag)
    if kind == CEILINGS:
        return f"copy {_fmt(row.get('copy_gbps'), '.4g')} GB/s"
    return ""


def _result_reason(row: dict) -> str:
    """A result at a glance: the speedup beside the interleaved medians and clock it is the ratio
    of, the rates beside the time, clock and power they were computed from (protocol named)."""
    from harness.governance.metrics import INTERLEAVED
    from harness.reporting import protocol

    m = row["metrics"]
    flags = [f for f in ("impossible", "rig_noisy") if row.get(f)]
    rt = protocol.rates(row)
    rates = f"{_fmt(m.get('tflops'), '.4g')} TFLOP/s, {_fmt(m.get('gbps'), '.4g')} GB/s"
    if rt.protocol == INTERLEAVED:
        rates += " (from that interleaved median)"
    else:
        rates += f" ({rt.text()}" + ("" if rt.power_w is None else f", {rt.power_w:.0f} W") + ")"
    return (f"speedup {_fmt(m.get('speedup'), '.3f')}× [{_fmt(m.get('speedup_ci_low'), '.3f')}, "
            f"{_fmt(m.get('speedup_ci_high'), '.3f')}] ({protocol.speedup_text(row)}); {rates}; host "
            f"{_fmt(m.get('host_us'), '.3g')} µs/call, control {_fmt(m.get('control'), '.4f')}"
            + (f" ({', '.join(flags)})" if flags else ""))


def _mb(v):
    return None if v is None else v / 1e6


def render_profile(line: str, rows: list[dict]) -> None:
    """The counter table of `bench profile`: one table per config, one line per kernel launch."""
    from rich.table import Table

    c = console()
    for key in dict.fromkeys(r["config_key"] for r in rows):
        t = Table(title=f"{line} · {key} — ncu counters of one call (MB = 1e6 bytes)")
        for col in ("kernel", "launch", "DRAM read MB", "DRAM write MB", "regs", "tensor %", "spill B", "µs",
                    "grid×block", "smem B", "occ %"):
            t.add_column(col, overflow="fold")
        for r in (r for r in rows if r["config_key"] == key):
            if r.get("error"):
                t.add_row(r["candidate"], "—", f"[red]{r['error']}[/]", *[""] * 8)
                continue
            for launch in r["launches"]:
                smem = sum(launch.get(k) or 0 for k in ("shared_mem_static_bytes", "shared_mem_dynamic_bytes"))
                spill = (launch["local_load_bytes"] or 0) + (launch["local_store_bytes"] or 0)
                t.add_row(r["candidate"], launch["kernel"][:40], _fmt(_mb(launch["dram_read_bytes"]), ".4g"),
                          _fmt(_mb(launch["dram_write_bytes"]), ".4g"), _fmt(launch["registers"], ".0f"),
                          _fmt(launch["tensor_pct"], ".3g"), _fmt(spill, ".4g"),
                          _fmt(None if launch["duration_ns"] is None else launch["duration_ns"] / 1e3, ".4g"),
                          f"{_fmt(launch['grid_size'], '.0f')}×{_fmt(launch['block_size'], '.0f')}",
                          _fmt(smem, ".0f"), _fmt(launch["occupancy_pct"], ".3g"))
        c.print(t)
    for r in rows:
        if r.get("impossible"):
            c.print(f"  [red]impossible[/] {r['candidate']} @ {r['config_key']}: {r['impossible']}")
        check = r.get("output_check") or {}
        if check and not check.get("passed"):
            c.print(f"  [red]incorrect[/] {r['candidate']} @ {r['config_key']}: {check.get('reason')}")


def render_ledger(line: str, rows: list[dict], history=(), superseded: dict | None = None) -> None:
    """The rows as a table, a superseded row marked with the row that superseded it, after the
    line's ``history`` notes (history.LineHistory.notes)."""
    from rich.markup import escape
    from rich.table import Table

    c = console()
    for note in history:
        head, *items = note.lines()
        c.print(f"[yellow]history[/]: {escape(head)}", soft_wrap=True)
        for i in items:
            c.print(f"  {escape(i)}", soft_wrap=True)
    superseded = superseded or {}
    t = Table(title=f"ledger/{line}.jsonl — {plural(len(rows), 'row')}", show_lines=False)
    for col in ("seq", "kind", "time", "commit", "candidate", "config", "outcome"):
        t.add_column(col, overflow="fold")
    for r in rows:
        gone = f"[dim](superseded by row {superseded[r['seq']]})[/] " if r["seq"] in superseded else ""
        t.add_row(str(r["seq"]), r["kind"], r["time"][:19], r["commit"][:10], r.get("candidate", ""),
                  r.get("config_key", ""), gone + escape(outcome_reason(r)))
    c.print(t)


def render_kernels(kernels: dict, device: str) -> None:
    from rich.table import Table

    t = Table(title=f"kernels (this machine: {device})")
    for col in ("name", "workloads", "dtypes", "devices", "usable here", "source"):
        t.add_column(col, overflow="fold")
    for name in sorted(kernels):
        k = kernels[name]
        why = k.unusable_reason(device)
        t.add_row(name, ",".join(k.workloads), ",".join(k.dtypes), ",".join(k.devices),
                  "[green]yes[/]" if why is None else f"[yellow]no[/]: {why}", shown(k.source))
    console().print(t)


def render_registered(row: dict) -> None:
    """The registered row: identity, bar, and what the line can tell apart (governance.power)."""
    from rich.markup import escape

    c = console()
    c.print(f"registered line [bold]{row['line']}[/] — sha256 {row['registration_sha256'][:12]}, "
            f"commit {row['registration_commit'][:12]}, {plural(row['n_configs'], 'config')}; "
            f"bar: {escape(row['registration']['go'])}")
    for dt, f in sorted((row.get("tolerance_floor") or {}).items()):
        if f.get("unchecked"):
            c.print(f"  tolerance floor, {dt}: not checked ({f['unchecked']})")
            continue
        from harness.governance.power import ceil_sig

        c.print(f"  tolerance floor, {dt}: the reference rounded to the nearest {dt} needs atol >= "
                f"{ceil_sig(f['need_atol']):g} at rtol {f['rtol']:g} (registered atol {f['atol']:g}) on "
                f"{', '.join(f['configs'])}, |ref| up to {max(f['magnitude'].values()):.3g}")
    power = row.get("tolerance_power") or {}
    checks = power.get("canaries", [])
    if checks:
        n_rej = sum(ch["rejected"] for ch in checks)
        c.print(f"  tolerance power: {n_rej} of {len(checks)} canary checks rejected"
                + (f"; waived (accept_weak): {', '.join(power['accepted_weak'])}" if power.get("accepted_weak") else ""))
    for what, seen in sorted((power.get("downgrades") or {}).items()):
        c.print(f"  precision {what}: {seen}")
    _render_reductio(c, row.get("reductio") or {})
    res = row.get("timing_resolution") or {}
    if res:
        c.print(f"  smallest resolvable speedup ({res['mode']} mode): {res['resolvable_speedup']:.3f}"
                + (f" (control spread on {', '.join(res['devices'])})" if res.get("devices")
                   else f" (no recorded control spread: the control tolerance {res['control_tolerance']:g})"))
        for w in res.get("warnings", []):
            c.print(f"  [yellow]warning[/]: {w}")


def _render_reductio(c, red: dict) -> None:
    """What the registered bar was checked against (governance.reductio), and any waiver."""
    from rich.markup import escape

    waived = red.get("waived") or []
    for d in red.get("checked", []):
        c.print(f"  reductio: checked against {escape(d['device'])} (ceilings row {d['ceilings_ref']['seq']}, "
                f"{plural(d['baseline_times'], 'recorded baseline time')})")
    for d in red.get("not_checked", []):
        c.print(f"  reductio: not checked against {escape(d['device'])}: {escape(d['why'])}")
    if red.get("note"):
        c.print(f"  [yellow]note[/]: {escape(red['note'])}")
    if red.get("beyond_ceiling_ok"):
        what = f"it would refuse: {waived[0]}" if waived else "nothing known is beyond a ceiling"
        c.print(escape(f"  reductio waived ([bar] beyond_ceiling_ok = {red['beyond_ceiling_ok']!r}): {what}"))


def render_verdict(v) -> None:
    c = console()
    for cl in v.bar.clauses:
        mark = "[green]pass[/]" if cl.passed else "[red]fail[/]"
        c.print(f"  {mark}  {cl.text}   → {_fmt(cl.value, '.4g')} over {plural(cl.n, 'row')}")
    for cl in v.verify:
        mark = {True: "[green]pass[/]", False: "[red]fail[/]", None: "[yellow]unknown[/]"}[cl.passed]
        bad = [x for x in cl.checks if x.holds is not True]
        shown = "; ".join(f"{x.candidate} @ {x.config_key}: {_fmt(x.left, '.4g')} vs {_fmt(x.right, '.4g')}"
                          for x in bad[:3])
        c.print(f"  {mark}  verify: {cl.text}   over {plural(len(cl.checks), 'profiled result')}"
                + (f" — {len(bad)} not holding, e.g. {shown}" if bad else ""))
    if v.excluded:
        c.print(f"  excluded from the bar: {', '.join(f'{k}: {n}' for k, n in sorted(v.excluded.items()))}")
    again = v.row.get("remeasured") or []
    if again:
        c.print(f"  re-measured at the same commit, decided on the newest measurement ({plural(len(again), 'pair')}):")
        for m in again[:MAX_LISTED]:
            c.print(f"    {Remeasure.from_row(m).describe()}", markup=False)
        if len(again) > MAX_LISTED:
            c.print(f"    and {len(again) - MAX_LISTED} more (bench ledger show {v.row['line']})")
    cov = v.row.get("coverage")
    if cov:
        c.print(f"  coverage: decided on {cov['decided']} of {cov['pairs']} registered pairs "
                f"(min_coverage {cov['min_coverage']:g})")
    c.print(f"  {v.primary} = {_fmt(v.primary_value, '.4g')}, predicted {v.prediction:g}"
            + ("" if v.primary_value is None else f" (outcome − prediction = {v.primary_value - v.prediction:+.4g})"))
    color = "green" if v.outcome == "GO" else "red"
    if v.dry_run:
        c.print(f"[bold {color}]{v.outcome}[/] — dry run: nothing written, line {v.row['line']} stays open "
                f"(`bench verdict {v.row['line']}` writes this verdict and commits it)")
        return
    c.print(f"[bold {color}]{v.outcome}[/] — line {v.row['line']} closed at ledger row {v.row['seq']}"
            + (f", committed as {v.anchored[:12]}" if v.anchored else ""))


def render_ceilings(row: dict, measured: bool, *, commit: str | None = None, committed: bool = True) -> None:
    """The ceilings row (``seq``, hash), its figures, and whether git holds it (``commit``: committed now)."""
    c = console()
    c.print(f"{'measured' if measured else 'stored'} ceilings for {row.get('fingerprint', {}).get('name', row.get('device'))} "
            f"(ledger/_device_ceilings.jsonl row {row.get('seq')}, {str(row.get('hash'))[:12]}):")
    c.print(f"  copy bandwidth: {_fmt(row.get('copy_gbps'), '.4g')} GB/s (read + write)")
    for dt, tf in sorted((row.get('matmul_tflops') or {}).items()):
        c.print(f"  matmul {dt}: {_fmt(tf, '.4g')} TFLOP/s")
    if commit:
        c.print(f"  committed in {commit[:12]}")
    elif not committed:
        c.print("  [yellow]not committed[/] (--no-commit): commit it before sweep rows that name it are committed "
                "(git commit -m 'bench: ceilings' -- ledger/_device_ceilings.jsonl)")


def _who(row: dict) -> str:
    return f"baseline {row['candidate']}" if row.get("role") == "baseline" else row.get("candidate", "")


def config_progress(done: int, total: int, config_key: str, rows, elapsed: float | None) -> str:
    """One finished config for a log: its key, each candidate's outcome, and how long it took."""
    parts = [f"{_who(r)} {r['kind']}: {outcome_reason(r).splitlines()[0]}" for r in rows if r["kind"] != SUPERSEDES]
    took = "" if elapsed is None else f" ({elapsed:.1f} s)"
    counter = f"[{done}/{total}]" if done <= total else "[again]"  # a rig-noisy pair measured again
    return f"{counter} {config_key}{took} — " + ("; ".join(parts) or "no outcome")


def _sweep_table(rows: list[dict]):
    """Per (config, candidate): outcome, speedup with its CI beside the interleaved medians and
    clock it came from, control, and TFLOP/s beside the time and clock of its own protocol."""
    from rich.markup import escape
    from rich.table import Table

    from harness.reporting import protocol

    t = Table(title="outcomes at this commit on this device", show_lines=False)
    t.add_column("config", no_wrap=True)
    for col in ("candidate", "outcome", "speedup [CI]", "interleaved ms (vs baseline) at clock", "control",
                "TFLOP/s", "rate from (protocol, ms, clock)"):
        t.add_column(escape(col), overflow="fold")
    for r in sorted(rows, key=lambda r: r["seq"]):
        m = r.get("metrics") or {}
        if r["kind"] == RESULT:
            flags = [f for f in ("impossible", "rig_noisy") if r.get(f)]
            outcome = "result" + (f" ({', '.join(flags)})" if flags else "")
            speed = (f"{_fmt(m.get('speedup'), '.3f')}× [{_fmt(m.get('speedup_ci_low'), '.3f')}, "
                     f"{_fmt(m.get('speedup_ci_high'), '.3f')}]")
            times = protocol.speedup_text(r, named=False)  # the column names the protocol
            rate, source = _fmt(m.get("tflops"), ".4g"), protocol.rates(r).text()
        else:
            outcome, speed = f"{r['kind']}: {outcome_reason(r).splitlines()[0]}", "—"
            times = rate = source = "—"
        t.add_row(r["config_key"], escape(_who(r)), escape(outcome), escape(speed), escape(times),
                  _fmt(m.get("control"), ".4f"), rate, escape(source))
    return t


def render_sweep_summary(summary: dict, rows: list[dict] = (), uncommitted: str | None = None,
                         resume: str | None = None) -> None:
    """The sweep's end: a per-config table of ``rows`` (current outcomes at this commit and
    device), the counts, the control, notes, and — when ``uncommitted`` names the ledger
    file and git says it has rows no commit holds — the command that anchors them; then why
    it stopped early, if it did: a signal (with ``resume``, the command that resumes) or a
    baseline failing the gate."""
    c = console()
    if rows:
        c.print(_sweep_table(list(rows)))
    counts = ", ".join(f"{k}: {n}" for k, n in sorted(summary["counts"].items())) or "nothing run"
    c.print(f"sweep of line [bold]{summary['line']}[/] at {summary['commit'][:12]} — {counts}"
            + (f"; {summary['resumed']} already done at this commit on this device" if summary.get("resumed") else ""))
    if summary.get("rejections"):
        c.print("  correctness rejections by reason: "
                + ", ".join(f"{k}: {n}" for k, n in sorted(summary["rejections"].items())))
    ctl = summary.get("control")
    if ctl:
        c.print(f"  control (baseline vs itself): median {ctl['median']:.4f}, range [{ctl['min']:.4f}, {ctl['max']:.4f}] "
                f"over {plural(ctl['n'], 'config')}; {ctl['noisy']} outside ±{ctl['tolerance']:.1%} (rig-noisy)")
    for note in summary.get("notes", []):
        c.print(f"  [yellow]note[/]: {note}")
    if summary.get("anchored"):
        c.print(f"  rows committed to git after each config ({len(summary['anchored'])} commits, last "
                f"{summary['anchored'][-1][:12]})")
    if uncommitted:
        c.print(f"  {uncommitted} has rows no commit holds yet: commit them (git add {uncommitted} && "
                f"git commit -m \"ledger: {summary['line']}\") so git anchors what was measured; the verdict "
                f"refuses until then")
    from rich.markup import escape

    if summary.get("baseline_failed"):
        _render_baseline_failed(c, summary)
    if summary.get("interrupted"):
        c.print(f"[yellow]stopped[/] {_stopped_how(summary)}; every row above is written"
                + (f": to resume, run: {escape(resume)}" if resume else ""))


def _not_run(summary: dict) -> str:
    left = summary.get("left")
    return "before any config ran" if left is None else f"with {plural(left, 'config')} not run"


def _stopped_how(summary: dict) -> str:
    """How a signal stopped the sweep, and what of it was lost."""
    import signal

    if not summary.get("at_once"):
        return f"by Ctrl-C after the config(s) in flight finished, {_not_run(summary)}"
    what = "SIGTERM" if summary.get("signal") == signal.SIGTERM else "Ctrl-C"
    return (f"at once by {what}, {_not_run(summary)} (a config in flight, if any, was dropped: nothing of it "
            f"is written)")


def _render_baseline_failed(c, summary: dict) -> None:
    """Why a baseline failing the gate stops the sweep, and the two ways out."""
    from rich.markup import escape

    b = summary["baseline_failed"]
    need = (f"; its failing elements need at least atol {b['need_atol']:.3g} at rtol {b['rtol']:g}"
            if b.get("need_atol") is not None else "")
    c.print("[red]stopped[/]: " + escape(f"baseline {b['baseline']} fails the correctness gate at "
                                          f"{b['config_key']} [{b['tag']}]: {b['reason']}"))
    stop = (f"  No candidate can be timed against a baseline that fails, so the sweep stops here {_not_run(summary)} "
            f"instead of skipping every candidate of every config. ")
    if b.get("tolerance"):
        c.print(stop + f"Either the tolerance is wrong (atol {b['atol']:g}, rtol {b['rtol']:g}{need}): register the "
                f"bar again as a new line with amends = \"{summary['line']}\" — or the baseline is wrong: fix it "
                f"and commit (a new commit is swept afresh).")
    else:
        c.print(stop + escape(f"No tolerance excuses this ({b['what']}): the baseline is wrong here — fix it and "
                              f"commit (a new commit is swept afresh), or pick another baseline in a new line with "
                              f"amends = \"{summary['line']}\"."))


def render_warmed(w) -> None:
    """One line per (kernel, config) as ``bench warm`` finishes it."""
    console().print(f"  {w.kernel} {w.config_key}: {w.seconds:.1f}s"
                    + (f"  [red]FAILED[/] {w.error}" if w.error else ""))


def render_warm_summary(summary) -> None:
    c = console()
    p = summary.plan
    for name, why in p.left_out:
        c.print(f"  {name}: {why}")
    if not p.tasks:
        c.print(f"nothing to warm: no kernel of line [bold]{p.line}[/] compiles ahead on {p.device} here")
        return
    failed = len(summary.failed)
    c.print(f"warmed {len(summary.warmed)} (kernel, config) pairs of line [bold]{p.line}[/] on {p.device} "
            f"in {summary.seconds:.0f}s" + (f", [red]{failed} failed[/] (the sweep's gate will say why)"
                                             if failed else ""))


def render_device_wait(key: str, holder: dict | None) -> None:
    from harness.execution.devicelock import describe_holder

    console().print(f"[yellow]waiting[/] for device {key}: another bench process is measuring on it"
                    f"{describe_holder(holder)}; this sweep starts when it is done (Ctrl-C to give up, "
                    f"--no-wait to refuse instead)")


def render_interrupt_pending() -> None:
    console().print("[yellow]interrupted[/]: finishing the config(s) in flight and writing their rows, then "
                    "stopping; press Ctrl-C again to stop at once (nothing partial is written either way)")
