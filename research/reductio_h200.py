"""The reductio on this machine's GPU, through the real CLI: bars registered and swept against
its measured ceilings (issue 27, items 1 and 2).

Run from the repository root on the GPU machine (one command; about two minutes on an H200):

    PYTHONUNBUFFERED=1 python3 -m research.reductio_h200

It works in scratch git repositories under a temporary directory (bench runs from this
checkout; nothing of this repository's ledger is touched) and writes the transcript — every
command, its exit code and output — to ``$OUT/reductio_h200.txt`` (or ``--out``):

A. a repository holding this checkout's committed device ceilings and ``ledger/aa-h200.jsonl``
   (cublas_stack's own recorded H200 times): ``bench ceilings`` (this GPU's row: the stored
   one when its fingerprint is known, else measured now), then ``bench register`` of a TFLOP/s
   bar no device reaches, a fraction of a ceiling above 1, a speedup the baseline's recorded
   time and the physical floor cannot allow, the first with ``[bar] beyond_ceiling_ok``, the
   issue's bars that cannot decide, and an ordinary bar;
B. a repository with no ceilings: a rate bar registers (with the note that no device is known),
   and ``bench sweep`` measures this GPU's ceilings first, then refuses it before any config.

Each step states the exit code it expects; the script exits 1 when one differs. Figures here
are not results: a refusal's arithmetic is the point.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The bench call's own limit: a sweep's ceilings measurement included.
CALL_TIMEOUT_S = 600

LINE = textwrap.dedent('''\
    schema = {schema}
    hypothesis = "a bar checked against the measured ceilings of the device it runs on"
    workload = "attention"
    candidate = "sdpa"
    baseline = "{baseline}"

    [grid]
    batch = [8]
    heads = [16]
    seq_len = {seq_len}
    head_dim = [128]
    dtype = ["float16"]
    causal = [false]

    [correctness]
    # Tight enough for every canary at these sizes (the lines are never timed).
    atol = 2e-3
    rtol = 2e-3
    seeds = [0]
    families = ["normal"]

    [timing]
    mode = "cold"

    [bar]
    go = "{go}"
    prediction = 1.0
    {extra}
    ''')

RATE = "min(tflops where seq_len >= 4096) >= 1e6 and pass_rate == 1.0"
# name -> (bar, expected exit code, registration options)
CASES_A = {
    "rate": (RATE, 2, {}),
    "fraction": ("min(gbps_frac) >= 1.2 and pass_rate == 1.0", 2, {}),
    "speedup": ("min(speedup where seq_len == 1024) >= 20 and pass_rate == 1.0", 2, {}),
    "waived": (RATE, 0, {"schema": 3, "extra": 'beyond_ceiling_ok = "a demonstration of the waiver"'}),
    "never": ("pass_rate == 1.5", 2, {}),
    "one-pair": ("geomean(speedup) >= 1.1 and count(speedup) >= 2", 2, {"seq_len": "[4096]"}),
    "idle": ("geomean(speedup) >= 1.10 and pass_rate == 1.0 or geomean(speedup) < 1.10 and pass_rate <= 1.0", 2, {}),
    "ordinary": ("min(speedup where seq_len == 4096) >= 1.5 and pass_rate == 1.0", 0, {}),
}


def _registration(go: str, *, baseline: str = "cublas_stack", schema: int = 1, seq_len: str = "[1024, 4096]",
                  extra: str = "") -> str:
    return LINE.format(schema=schema, baseline=baseline, seq_len=seq_len, go=go, extra=extra)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)


def _repo(where: Path, lines: dict[str, str], ledgers: tuple[str, ...]) -> Path:
    """A committed scratch repository: registrations/, and copies of this checkout's ledgers."""
    (where / "registrations").mkdir(parents=True)
    (where / "ledger").mkdir()
    (where / ".gitignore").write_text("ledger/*.lock\n__pycache__/\n")
    for name, text in lines.items():
        (where / "registrations" / f"{name}.toml").write_text(text)
    for name in ledgers:
        shutil.copy(ROOT / "ledger" / name, where / "ledger" / name)
    _git(where, "init", "-q", "-b", "main")
    _git(where, "config", "user.email", "reductio@localhost")
    _git(where, "config", "user.name", "reductio")
    _git(where, "add", "-A")
    _git(where, "commit", "-q", "-m", "scratch")
    return where


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Transcript:
    """Runs bench commands in a scratch repository and records each with its exit code."""

    def __init__(self):
        self.parts: list[str] = []
        self.mismatches: list[str] = []

    def bench(self, repo: Path, label: str, expect: int, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, capture_output=True, text=True,
                           env=env, timeout=CALL_TIMEOUT_S)
        mark = "as expected" if r.returncode == expect else f"EXPECTED {expect}"
        if r.returncode != expect:
            self.mismatches.append(f"{label}: exit {r.returncode}, expected {expect}")
        self.parts.append(f"=== {label}: bench {' '.join(args)} -> exit {r.returncode} ({mark})\n"
                          f"{r.stdout.rstrip()}\n{r.stderr.rstrip()}".rstrip() + "\n")
        print(self.parts[-1], flush=True)
        return r

    def note(self, text: str) -> None:
        self.parts.append(text + "\n")
        print(text, flush=True)


def run(out: Path, scratch: Path) -> int:
    t = Transcript()
    a = _repo(scratch / "known", {name: _registration(go, **opts) for name, (go, _, opts) in CASES_A.items()},
              ("_device_ceilings.jsonl", "aa-h200.jsonl"))
    t.bench(a, "this device's ceilings", 0, "ceilings")
    for name, (_, expect, _) in CASES_A.items():
        t.bench(a, name, expect, "register", f"registrations/{name}.toml")

    b = _repo(scratch / "unknown", {"sweep-rate": _registration(RATE, baseline="torch_stack")}, ())
    t.bench(b, "sweep-rate, no device known", 0, "register", "sweep-rate")
    _git(b, "add", "-A")
    _git(b, "commit", "-q", "--allow-empty", "-m", "registered")
    t.bench(b, "sweep-rate, the sweep on this device", 2, "sweep", "sweep-rate")
    rows = [json.loads(x)["kind"] for x in _lines(b / "ledger" / "sweep-rate.jsonl")]
    ceilings = [json.loads(x) for x in _lines(b / "ledger" / "_device_ceilings.jsonl")]
    t.note(f"sweep-rate's ledger after the sweep: {rows} (nothing but its registered row); ceilings measured "
           f"first: {[(c['fingerprint']['name'], round(c['copy_gbps']), c['matmul_tflops']) for c in ceilings]}")
    if rows != ["registered"]:
        t.mismatches.append(f"sweep-rate: the ledger holds {rows}")
    t.note("all as expected" if not t.mismatches else "MISMATCHES: " + "; ".join(t.mismatches))
    out.mkdir(parents=True, exist_ok=True)
    (out / "reductio_h200.txt").write_text("\n".join(t.parts))
    return 1 if t.mismatches else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")), help="where the transcript goes")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="reductio-"))
    try:
        return run(args.out, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
