"""What `bench sweep` prints: a line per finished config, the closing table and summary, and the
device-wait and interrupt notes (also said by `bench profile` and `bench ceilings`)."""

from __future__ import annotations

from harness.errors import plural
from harness.ledger.payloads import Metrics
from harness.vocab.outcomes import RESULT, SUPERSEDES
from harness.reporting.render.console import console
from harness.reporting.render.rows import fmt, outcome_reason
from harness.workloads.keys import shorten
from harness.reporting.analysis import protocol
from harness.reporting.render.console import table
from harness.vocab.devices import instance_text
from harness.execution.devicelock import describe_holder


def _who(row: dict) -> str:
    return f"baseline {row.candidate}" if row.role == "baseline" else (row.candidate or "")


def config_progress(done: int, total: int, config_key: str, rows, elapsed: float | None) -> str:
    """One finished config for a log: its key, each candidate's outcome, and how long it took."""
    parts = [f"{_who(r)} {r.kind}: {outcome_reason(r).splitlines()[0]}" for r in rows if r.kind != SUPERSEDES]
    took = "" if elapsed is None else f" ({elapsed:.1f} s)"
    counter = f"[{done}/{total}]" if done <= total else "[again]"  # a rig-noisy pair measured again
    return f"{counter} {config_key}{took} — " + ("; ".join(parts) or "no outcome")


def _sweep_table(rows: list[dict]):
    """Per (config, candidate): outcome, speedup with its CI beside the interleaved medians and
    clock it came from, control, and TFLOP/s beside the time and clock of its own protocol."""
    from rich.markup import escape

    keys, shared = shorten(r.config_key for r in rows)
    t = table(title="outcomes at this commit on this device" + (f" (every config: {shared})" if shared else ""),
              show_lines=False)
    t.add_column("config")
    for col in ("candidate", "outcome", "speedup [CI]", "interleaved ms (vs baseline) at clock", "control",
                "TFLOP/s", "rate from (protocol, ms, clock)"):
        t.add_column(escape(col), overflow="fold")
    for r in sorted(rows, key=lambda r: r.seq):
        m = Metrics.from_row(r.metrics or {})
        if r.kind == RESULT:
            flags = [f for f in ("impossible", "rig_noisy") if getattr(r, f)]
            outcome = "result" + (f" ({', '.join(flags)})" if flags else "")
            speed = (f"{fmt(m.speedup, '.3f')}× [{fmt(m.speedup_ci_low, '.3f')}, "
                     f"{fmt(m.speedup_ci_high, '.3f')}]")
            times = protocol.speedup_text(r, named=False)  # the column names the protocol
            rate, source = fmt(m.tflops, ".4g"), protocol.rates(r).text()
        else:
            outcome, speed = f"{r.kind}: {outcome_reason(r).splitlines()[0]}", "—"
            times = rate = source = "—"
        t.add_row(keys[r.config_key], escape(_who(r)), escape(outcome), escape(speed), escape(times),
                  fmt(m.control, ".4f"), rate, escape(source))
    return t


# The phases of a config in the order they run, as the cost line names them (pipeline/phase.py).
COST_NAMES = (("setup", "setup"), ("gate", "gates"), ("timing", "timing"), ("check", "after-timing checks"),
              ("rates", "sustained"), ("recheck", "recheck"))


def cost_line(cost: dict | None) -> str | None:
    """Where the sweep's own time went, per config run: one line (None: no config ran)."""
    if not cost or not cost.get("configs"):
        return None
    n = cost["configs"]
    ph = cost.get("phases") or {}
    parts = [f"{name} {ph[key] / n:.2f} s" + (f" (float64 references {cost['of_which']['reference'] / n:.2f} s)"
                                               if key == "gate" and (cost.get("of_which") or {}).get("reference")
                                               else "")
             for key, name in COST_NAMES if ph.get(key)]
    parts.append(f"append+commit {cost['append_commit'] / n:.2f} s")
    if cost.get("profile"):
        parts.append(f"[verify] profiles {cost['profile'] / n:.2f} s")
    return (f"harness time per config ({plural(n, 'config')} run, {cost['wall']:.1f} s wall): "
            + ", ".join(parts))


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
    c.print(f"{_what(summary)} of line [bold]{summary['line']}[/] at {summary['commit'][:12]} — {counts}"
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
    line = cost_line(summary.get("cost"))
    if line:
        c.print(f"  {line}")
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


def _what(summary: dict) -> str:
    """'sweep', or for `bench replicate` what the replicate is: of which verdict, on which
    instance, at which commit, on which stack (registration/replication.py)."""
    from rich.markup import escape

    rep = summary.get("replicate")
    if not rep:
        return "sweep"
    of = "before the verdict" if rep.get("of") is None else f"of verdict row {rep['of']}"
    at = ("at the closing commit" if rep.get("at") == "closing"
          else f"at a later commit than {str(rep.get('closing_commit'))[:12]}")
    other = ", on another software stack: never pooled" if rep.get("stack") == "other" else ""
    return f"replicate ({of}, on {escape(instance_text(rep.get('instance') or {}))}, {at}{other})"


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


def render_device_wait(key: str, holder: dict | None) -> None:
    console().print(f"[yellow]waiting[/] for device {key}: another bench process is measuring on it"
                    f"{describe_holder(holder)}; this sweep starts when it is done (Ctrl-C to give up, "
                    f"--no-wait to refuse instead)")


def render_interrupt_pending() -> None:
    console().print("[yellow]interrupted[/]: finishing the config(s) in flight and writing their rows, then "
                    "stopping; press Ctrl-C again to stop at once (nothing partial is written either way)")
