"""The cost of worker isolation: sweep lines inline and in a worker, side by side.

For each line, a throwaway git repository (a copy of this tree, committed) registers two
fresh copies of the line's registration, ``<line>_inline`` and ``<line>_workers``, and
sweeps one with ``--inline`` and the other with the default worker pool, alternating which
goes first. It prints, per line, the wall time of each sweep and its control ratios (median,
range, how many outside the tolerance), and writes the same to $OUT/isolation.json and
$OUT/isolation.md, with each sweep's log and ledger.

    python3 scripts/bench_isolation.py [LINE ...]     (default: example decode-small-h200)

On the H200 the defaults take about 7 minutes. Triton caches are warmed first
(``bench warm``), so neither mode pays for compiles the other reuses. A copy whose registered
tolerance cannot fail one of the canaries ``bench register`` checks gets that canary waived
(``accept_weak``, recorded in the report): this measures the cost of isolation, not a bar.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LINES = ("example", "decode-small-h200")
COPY_IGNORE = shutil.ignore_patterns(".git", ".cache", "__pycache__", "*.egg-info", ".pytest_cache", "device-out",
                                     "bench-out", "reports", ".whl", ".venv", "*.lock")


def _run(cmd, cwd, env, log: Path) -> tuple[int, float]:
    t0 = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    return rc, time.perf_counter() - t0


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _controls(ledger: Path) -> dict:
    rows = [json.loads(x) for x in ledger.read_text().splitlines()] if ledger.exists() else []
    res = [r for r in rows if r["kind"] == "result"]
    ctl = [r["metrics"]["control"] for r in res]
    tol = res[0]["policy"]["control_tolerance"] if res else None
    kinds = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    return {"results": len(res), "kinds": kinds,
            "control_median": statistics.median(ctl) if ctl else None,
            "control_min": min(ctl) if ctl else None, "control_max": max(ctl) if ctl else None,
            "outside": sum(1 for c in ctl if tol is not None and abs(c - 1) > tol), "tolerance": tol,
            "controls": {f"{r['config_key']}|{r['candidate']}": r["metrics"]["control"] for r in res}}


def _waive(reg: Path, canary: str) -> None:
    """Add ``canary`` to the copy's [correctness] accept_weak list."""
    import re
    import tomllib

    text = reg.read_text()
    have = tomllib.loads(text).get("correctness", {}).get("accept_weak", [])
    entry = "accept_weak = " + json.dumps(sorted({*have, canary}))
    if have:
        text = re.sub(r"(?m)^accept_weak\s*=.*$", entry, text, count=1)
    else:
        text = text.replace("[correctness]\n", "[correctness]\n" + entry + "\n", 1)
    reg.write_text(text)


def _register(py, repo, env, out, name) -> tuple[int, list[str]]:
    """Register ``name``, waiving each canary its tolerance cannot fail; (rc, waived)."""
    import re

    waived: list[str] = []
    while True:
        log = out / f"register-{name}.log"
        rc, _ = _run([py, "-m", "harness", "register", name], repo, env, log)
        hit = re.search(r"cannot fail canary '(\w+)'", log.read_text())
        if rc == 0 or hit is None or hit.group(1) in waived:
            return rc, waived
        waived.append(hit.group(1))
        _waive(repo / "registrations" / f"{name}.toml", hit.group(1))
        _git(repo, "-c", "user.email=bench@localhost", "-c", "user.name=bench", "commit", "-qam",
             f"isolation copy {name}: waive {hit.group(1)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lines", nargs="*", default=list(DEFAULT_LINES))
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", ROOT / "device-out"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-isolation-"))
    repo = work / "repo"
    shutil.copytree(ROOT, repo, ignore=COPY_IGNORE)
    for f in (repo / "ledger").glob("*.jsonl"):  # fresh lines only; ceilings are not used (--no-ceilings)
        f.unlink()
    modes = {"inline": ["--inline"], "workers": []}
    for line in args.lines:
        src = (repo / "registrations" / f"{line}.toml").read_text()
        for mode in modes:
            (repo / "registrations" / f"{line}_{mode}.toml").write_text(src)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.email=bench@localhost", "-c", "user.name=bench", "add", "-A")
    _git(repo, "-c", "user.email=bench@localhost", "-c", "user.name=bench", "commit", "-q", "-m", "isolation")
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONUNBUFFERED": "1"}
    py = sys.executable
    report = {}
    for i, line in enumerate(args.lines):
        subprocess.run([py, "-m", "harness", "warm", line], cwd=repo, env=env, capture_output=True)
        order = list(modes) if i % 2 == 0 else list(reversed(modes))
        report[line] = {"order": order}
        for mode in order:
            name = f"{line}_{mode}"
            rc, waived = _register(py, repo, env, out, name)
            report[line].setdefault("waived", {})[mode] = waived
            if rc:
                print(f"{name}: register failed (see {out}/register-{name}.log)")
                return 1
            rc, wall = _run([py, "-m", "harness", "sweep", name, "--no-ceilings", *modes[mode]], repo, env,
                            out / f"sweep-{name}.log")
            shutil.copy(repo / "ledger" / f"{name}.jsonl", out / f"{name}.jsonl")
            report[line][mode] = {"rc": rc, "wall_s": wall, **_controls(repo / "ledger" / f"{name}.jsonl")}
    lines_md = ["| line | mode | wall s | results | control median | control range | outside tol |",
                "|---|---|---|---|---|---|---|"]
    for line, r in report.items():
        for mode in modes:
            m = r[mode]
            rng = f"[{m['control_min']:.4f}, {m['control_max']:.4f}]" if m["results"] else "—"
            med = f"{m['control_median']:.4f}" if m["results"] else "—"
            lines_md.append(f"| {line} | {mode} | {m['wall_s']:.1f} | {m['results']} | {med} | {rng} | "
                            f"{m['outside']} |")
        ratio = r["workers"]["wall_s"] / r["inline"]["wall_s"]
        lines_md.append(f"| {line} | workers / inline | {ratio:.3f} | | | | |")
    text = "\n".join(lines_md)
    print(text)
    (out / "isolation.md").write_text(text + "\n")
    (out / "isolation.json").write_text(json.dumps(report, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r[m]["rc"] == 0 for r in report.values() for m in modes) else 1


if __name__ == "__main__":
    sys.exit(main())
