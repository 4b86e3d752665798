"""Issue 48, item 5: does a run's speedup interval cover the next run's speedup?

Given two or more ledgers of one line (or one ledger holding several runs: sweeps at other
commits, on other cards), for each ordered pair of runs (first, second) it counts the pairs
(config, candidate) both runs counted whose speedup in the second run lies inside the first
run's within-run CI (the row's stored ``speedup_ci_low`` / ``speedup_ci_high``), and inside the
first run's next-run interval (``speedup_next_low`` / ``speedup_next_high``,
docs/measurement.md#the-next-runs-speedup), beside each one's nominal level.

The next-run interval of the first run is built as it could have been before the second run
existed: its between-run variance comes from the replicates among the *other* runs given
(never the second one), else the first run's own controls, never below the floor. So with two
runs, the controls or the floor set it; with three or more, the replicates of the runs not
being predicted. ``τ implied`` is the between-run deviation the two runs' own replicates show:
the value an honest τ should reach. Figures are ledger rows' only.

A run is the rows of one code commit on one device instance (``governance/nextrun.run_key``:
the host and the GPU's UUID or serial — rows before issue 48 carry neither, so two such hosts
of one name at one commit read as one run). A run given twice (two clones of one repository both holding
the shipped run) counts once.

    python3 -m research.ci_coverage A/ledger/LINE.jsonl B/ledger/LINE.jsonl [--pairs] [--json OUT.json]
    python3 -m research.ci_coverage ledger/flash-h200.jsonl ledger/flash-h200-v2.jsonl   # a demonstration

(the second line's runs are two different lines of one bar, on two H200s, under two versions
of the protocol: their coverage is a lower bound on a like-for-like re-sweep's.)

On the device, per H200 instance (two sweeps of a scratch copy of the line, each a run of its
own; the shipped run beside them), then over every instance's files together:

    python3 -m research.harness_cost flash-h200-v2 --out $OUT/sweep1 && \
    python3 -m research.harness_cost flash-h200-v2 --out $OUT/sweep2 && \
    python3 -m research.ci_coverage $OUT/sweep1/cost-flash-h200-v2.jsonl $OUT/sweep2/cost-flash-h200-v2.jsonl \
        ledger/flash-h200-v2.jsonl --pairs --json $OUT/ci_coverage.json
    python3 -m research.ci_coverage I1/sweep1/cost-flash-h200-v2.jsonl I1/sweep2/cost-flash-h200-v2.jsonl \
        I2/sweep1/cost-flash-h200-v2.jsonl I2/sweep2/cost-flash-h200-v2.jsonl ledger/flash-h200-v2.jsonl --pairs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import NEXT_RUN_LEVEL, NEXT_RUN_TAU_FLOOR, UserError, render_error
from harness import between_run, load_line as load_path, ledger_runs as runs, run_coverage as coverage

# A level or floor outside these is a typo, not a question (a 100% interval is infinite; a τ of
# 20% would say the runs measure different things).
MAX_FLOOR = 0.2
MIN_RUNS = 2


def _args(argv):
    p = argparse.ArgumentParser(prog="python3 -m research.ci_coverage", description=__doc__.split("\n")[0])
    p.add_argument("ledgers", nargs="+", type=Path, help="ledger files (.jsonl) of one line: two or more runs in all")
    p.add_argument("--level", type=float, default=NEXT_RUN_LEVEL,
                   help=f"the next-run interval's level (default {NEXT_RUN_LEVEL})")
    p.add_argument("--floor", type=float, default=NEXT_RUN_TAU_FLOOR,
                   help=f"the least between-run deviation τ (default NEXT_RUN_TAU_FLOOR = {NEXT_RUN_TAU_FLOOR}); "
                        f"0: the data's alone")
    p.add_argument("--pairs", action="store_true", help="list every pair's speedups and intervals too")
    p.add_argument("--json", type=Path, default=None, help="write the figures as JSON to this file")
    return p.parse_args(argv)


def load_runs(paths: list[Path]) -> list[tuple]:
    """(run, ledger path) for every run in ``paths``, each run once."""
    for path in paths:
        if path.suffix != ".jsonl" or not path.is_file():
            raise UserError(f"{path}: not a ledger file (a .jsonl file that exists): name ledger files, e.g. "
                            f"ledger/flash-h200-v2.jsonl")
    out, seen = [], set()
    for path in paths:
        view = load_path(path)  # the chain verified first (a broken ledger is refused)
        name = view.registered.line if view.registered is not None and view.registered.line else view.line
        for run in runs(view.rows, name):
            if run.key in seen:
                continue
            seen.add(run.key)
            out.append((run, path))
    if len(out) < MIN_RUNS:
        raise UserError(f"{len(out)} run(s) in {', '.join(map(str, paths))}: coverage needs at least {MIN_RUNS} runs of "
                        f"the line (two ledgers of it swept on two cards, or one ledger re-swept at another commit)")
    return out


def measure(found: list[tuple], *, level: float, floor: float) -> list:
    """``nextrun.Coverage`` for every ordered pair of runs (the first run's τ without the second)."""
    all_runs = [r for r, _ in found]
    out = []
    for first in all_runs:
        for second in all_runs:
            if first is second:
                continue
            others = [r for r in all_runs if r is not second]
            between = between_run(first.results.values(), others, floor=floor, level=level)
            out.append((first, second, coverage(first, second, between)))
    return out


def _same_card(first, second) -> bool:
    """Two runs on one card (two sweeps of it): the same card and device in their run keys."""
    return first.key[1:] == second.key[1:]


def _x(v) -> str:
    return "—" if v is None else f"{v:.4f}"


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} {k / n:6.1%}" if n else "—"


def _levels(levels) -> str:
    return "/".join(f"{x:.4g}" for x in levels) or "—"


def report(found: list[tuple], results: list, *, show_pairs: bool) -> list[str]:
    index = {id(r): i + 1 for i, (r, _) in enumerate(found)}
    lines = ["Coverage of a run's speedups by another run's intervals (pairs both runs counted):", "runs:"]
    for run, path in found:
        lines.append(f"  [{index[id(run)]}] {run.label}: {path}, {len(run.results)} results, "
                     f"{len(run.counted())} counted")
    lines.append(f"{'first → second':>15} {'pairs':>5}  {'in within-run CI':>17} {'nominal':>8}  "
                 f"{'in next-run':>12} {'nominal':>7}  {'τ implied':>9}  {'shift':>7}  τ used")
    tot = {}  # same card (two sweeps of one card) or not: [pairs, in CI, in next-run]
    for first, second, c in results:
        t = tot.setdefault(_same_card(first, second), [0, 0, 0])
        t[0] += c.n
        t[1] += c.in_ci
        t[2] += c.in_next
        implied = "—" if c.implied_tau is None else f"{c.implied_tau:.2%}"
        shift = "—" if c.shift is None else f"{c.shift:.4f}"
        lines.append(f"{f'[{index[id(first)]}] → [{index[id(second)]}]':>15} {c.n:>5}  {_pct(c.in_ci, c.n):>17} "
                     f"{_levels(c.ci_levels):>8}  {_pct(c.in_next, c.n):>12} {c.between.level:>7.4g}  "
                     f"{implied:>9}  {shift:>7}  {c.between.describe()}")
        for note in c.notes:
            lines.append(f"{'':>17}note: {note}")
    for same, (n, in_ci, in_next) in sorted(tot.items()):
        lines.append(f"{'runs on one card' if same else 'runs on two cards'} (all such ordered pairs): in the "
                     f"within-run CI {_pct(in_ci, n)}, in the next-run interval {_pct(in_next, n)}")
    names = sorted({run.label.split("@")[0] for run, _ in found})
    if len(names) > 1:
        lines.append(f"note: runs of {len(names)} lines ({', '.join(names)}): a scratch copy of a line "
                     f"(research/harness_cost.py's cost-LINE) holds that line's bar, a re-sweep; two lines registered "
                     f"apart (flash-h200, flash-h200-v2) may differ in protocol and kernel sources, a demonstration only")
    if show_pairs:
        for first, second, c in results:
            lines.append(f"[{index[id(first)]}] → [{index[id(second)]}]: config, candidate, speedup 1 [CI] [next-run], "
                         f"speedup 2")
            for p in c.pairs:
                lines.append(f"  {p.config_key} {p.candidate}: {_x(p.speedup)} [{_x(p.ci_low)}, {_x(p.ci_high)}] "
                             f"[{_x(p.next_low)}, {_x(p.next_high)}], {_x(p.second)}"
                             f"{'' if p.in_ci else ' (outside the CI)'}{'' if p.in_next else ' (outside the next-run)'}")
    return lines


def as_json(found: list[tuple], results: list) -> dict:
    index = {id(r): i + 1 for i, (r, _) in enumerate(found)}
    return {"runs": [{"index": index[id(r)], "label": r.label, "ledger": str(p), "commit": r.key[0], "card": r.key[1][1] or r.key[1][0],
                      "results": len(r.results), "counted": len(r.counted())} for r, p in found],
            "pairs": [{"first": index[id(a)], "second": index[id(b)], "same_card": _same_card(a, b), "n": c.n, "in_ci": c.in_ci,
                       "ci_levels": list(c.ci_levels), "in_next": c.in_next, "next_level": c.between.level,
                       "between": c.between.as_dict(), "implied_tau": c.implied_tau, "shift": c.shift,
                       "notes": list(c.notes)} for a, b, c in results]}


def main(argv=None) -> int:
    args = _args(argv)
    try:
        if not 0 < args.level < 1:
            raise UserError(f"--level {args.level:g}: a level lies in (0, 1), e.g. 0.95")
        if not 0 <= args.floor <= MAX_FLOOR:
            raise UserError(f"--floor {args.floor:g}: τ is a log-scale deviation in [0, {MAX_FLOOR:g}], e.g. 0.005")
        if args.json is not None and not args.json.parent.is_dir():
            raise UserError(f"--json {args.json}: its folder does not exist (create it, or name a file in one that does)")
        found = load_runs(args.ledgers)
        results = measure(found, level=args.level, floor=args.floor)
    except UserError as exc:
        render_error(str(exc))
        return exc.exit_code
    print("\n".join(report(found, results, show_pairs=args.pairs)))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(found, results), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
