"""What `bench profile` prints: the ncu counters of one call per (config, kernel)."""

from __future__ import annotations

from harness.ledger.payloads import Bare, Launch, OutputCheck, each
from harness.reporting.render.console import console
from harness.reporting.render.rows import fmt, mb


def render_profile(line: str, rows: list[dict]) -> None:
    """The counter table of `bench profile`: one table per config, one line per kernel launch."""
    from rich.table import Table

    c = console()
    for key in dict.fromkeys(r.config_key for r in rows):
        t = Table(title=f"{line} · {key} — ncu counters of one call (MB = 1e6 bytes)")
        for col in ("kernel", "launch", "DRAM read MB", "DRAM write MB", "regs", "tensor %", "spill B", "µs",
                    "grid×block", "smem B", "occ %"):
            t.add_column(col, overflow="fold")
        at = [r for r in rows if r.config_key == key]
        for r in at:
            if r.error:
                t.add_row(r.candidate, "—", f"[red]{r.error}[/]", *[""] * 8)
                continue
            _launch_rows(t, r.candidate, r.launches)
        # The workload's bare op, profiled once per config beside the kernels ([verify] bare_<counter>).
        bare = Bare.from_row(next((r.bare for r in at if r.bare), None))
        if bare is not None:
            if bare.error:
                t.add_row("bare op", "—", f"[red]{bare.error}[/]", *[""] * 8)
            else:
                _launch_rows(t, "bare op", bare.launches or [])
        c.print(t)
    for r in rows:
        if r.impossible:
            c.print(f"  [red]impossible[/] {r.candidate} @ {r.config_key}: {r.impossible}")
        if r.output_check:
            check = OutputCheck.from_row(r.output_check)
            if not check.passed:
                c.print(f"  [red]incorrect[/] {r.candidate} @ {r.config_key}: {check.reason}")


def _launch_rows(t, who: str, launches) -> None:
    """One table line per launch of ``who``'s profiled call."""
    for launch in each(Launch, launches):
        smem = (launch.shared_mem_static_bytes or 0) + (launch.shared_mem_dynamic_bytes or 0)
        spill = (launch.local_load_bytes or 0) + (launch.local_store_bytes or 0)
        t.add_row(who, launch.kernel[:40], fmt(mb(launch.dram_read_bytes), ".4g"),
                  fmt(mb(launch.dram_write_bytes), ".4g"), fmt(launch.registers, ".0f"),
                  fmt(launch.tensor_pct, ".3g"), fmt(spill, ".4g"),
                  fmt(None if launch.duration_ns is None else launch.duration_ns / 1e3, ".4g"),
                  f"{fmt(launch.grid_size, '.0f')}×{fmt(launch.block_size, '.0f')}",
                  fmt(smem, ".0f"), fmt(launch.occupancy_pct, ".3g"))
