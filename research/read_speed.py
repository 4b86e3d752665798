"""How long the read commands take (issue 51 item 2): `bench --help`, `bench status` with the
verification cache cold and warm, `bench ledger verify` and `bench report LINE`, each the
median of N runs of the real CLI as a subprocess, on this repository's ledgers.

Run from the repository root (any host; no GPU):

    python3 -m research.read_speed [--runs N] [--line LINE] [--checkout PATH ...]

``--checkout`` times another checkout (its code on its own ledgers: run in its folder, which
``python -m`` puts first on ``sys.path``), interleaved run by run with this one, so a
before/after pair shares the host's load. Each run gets a fresh cache home
(``XDG_CACHE_HOME`` in a temporary folder): one untimed `bench status` with the cache off
(``BENCH_NO_VERIFY_CACHE``) fills bench's private bytecode cache there, as an installed bench's
first run does; then the timed commands, the cold status first (no verification cached), the
warm one right after it. `bench report` writes under a temporary folder.

A timing test would fail on a busy host; this prints figures instead (docs/benchmarks.md
quotes them, with the host's load). It imports nothing of harness: only the CLI is timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The variable that turns the verification cache off (harness/reporting/analysis/verify_cache.py).
NO_CACHE_ENV = "BENCH_NO_VERIFY_CACHE"
DEFAULT_RUNS = 5
DEFAULT_LINE = "flash-h200-v2"
# The read commands timed, in order: (name, arguments, environment additions).
COMMANDS = (
    ("bench --help", ("--help",), {}),
    ("bench status (cold cache)", ("status",), {}),
    ("bench status (warm cache)", ("status",), {}),
    ("bench ledger verify", ("ledger", "verify"), {}),
    ("bench report LINE", ("report", "{line}", "--out", "{out}"), {}),
)


def run_once(checkout: Path, args: list[str], env: dict) -> float:
    """Wall seconds of ``python -m harness ARGS`` running ``checkout``'s code (exit status checked)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=checkout, env=env, capture_output=True,
                       text=True)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 1):  # ledger verify / status exit 1 where a line is broken: still timed
        raise SystemExit(f"{checkout}: bench {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return wall


def one_round(checkout: Path, line: str) -> dict[str, float]:
    """Every command once, in a fresh cache home."""
    home = Path(tempfile.mkdtemp(prefix="read-speed-"))
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", NO_CACHE_ENV)}
        env.update({"XDG_CACHE_HOME": str(home / "cache"), "PYTHONPATH": str(checkout), "COLUMNS": "200"})
        env.pop("PYTHONPYCACHEPREFIX", None)
        run_once(checkout, ["status"], {**env, NO_CACHE_ENV: "1"})  # bytecode cache filled; no verification cached
        out = {}
        for name, args, extra in COMMANDS:
            args = [a.format(line=line, out=home / "report") for a in args]
            out[name] = run_once(checkout, args, {**env, **extra})
        return out
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per command (the median is printed)")
    ap.add_argument("--line", default=DEFAULT_LINE, help="the line `bench report` reports")
    ap.add_argument("--checkout", action="append", type=Path, default=[],
                    help="another checkout to time on the same ledgers (repeatable), interleaved with this one")
    a = ap.parse_args(argv)
    checkouts = [Path.cwd().resolve(), *(p.resolve() for p in a.checkout)]
    times: dict[Path, dict[str, list[float]]] = {c: {n: [] for n, _, _ in COMMANDS} for c in checkouts}
    for i in range(a.runs):
        for c in (checkouts if i % 2 == 0 else checkouts[::-1]):  # interleaved, alternating order
            for name, t in one_round(c, a.line).items():
                times[c][name].append(t)
    load = os.getloadavg()
    print(f"median of {a.runs} runs, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    width = max(len(n) for n, _, _ in COMMANDS)
    print(f"{'command':<{width}}  " + "  ".join(f"{c.name:>14}" for c in checkouts))
    for name, _, _ in COMMANDS:
        cells = [f"{statistics.median(times[c][name]):>12.2f} s" for c in checkouts]
        print(f"{name.replace('LINE', a.line):<{width}}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
