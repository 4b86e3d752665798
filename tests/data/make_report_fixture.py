"""Regenerate tests/data/report-fixture.jsonl: a real CPU sweep of a small two-candidate line.

Run from the repository root: ``python3 tests/data/make_report_fixture.py``. It registers,
sweeps and decides the line in a temporary git repository and copies the ledger here; the
bfloat16 tolerance is set below what the baseline reaches, so the ledger also holds an
`incorrect` baseline and `skipped` candidates for the report's outcome counts.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from tests.conftest import REPO, bench_env, git  # noqa: E402

LINE = "report-fixture"
REGISTRATION = textwrap.dedent('''\
    schema = 1
    hypothesis = "SDPA (and its math backend) beat the bmm-softmax-bmm stack on small CPU shapes"
    workload = "attention"
    candidates = ["sdpa", "sdpa_math"]
    baseline = "torch_stack"

    [grid]
    batch = [1]
    heads = [2]
    seq_len = [32, 64, 128]
    head_dim = [16]
    dtype = ["float32", "bfloat16"]
    causal = [false]

    [correctness]
    atol = { float32 = 1e-5, bfloat16 = 1e-7 }
    rtol = { float32 = 1e-4, bfloat16 = 1e-7 }
    seeds = [0]
    families = ["normal", "large_logits"]

    [timing]
    warmup_ms = 5
    min_samples = 8
    max_samples = 40
    min_time_ms = 10
    timeout_s = 5

    [bar]
    go = "geomean(speedup where candidate == \\"sdpa\\") >= 1.0 and pass_rate == 1.0"
    prediction = 1.2
    primary = "geomean(speedup where candidate == \\"sdpa\\")"
    include_noisy = true
    allow_missing = true
    ''')


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # Rows record each kernel's source path: run a throwaway copy of bench so the
        # committed fixture names no path of this checkout.
        bench = Path(tmp) / "bench"
        for part in ("harness", "kernels"):
            shutil.copytree(REPO / part, bench / part, ignore=shutil.ignore_patterns("__pycache__"))
        env = {**bench_env(), "PYTHONPATH": str(bench)}
        root = Path(tmp) / "proj"
        (root / "registrations").mkdir(parents=True)
        (root / "ledger").mkdir()
        (root / ".gitignore").write_text("ledger/*.lock\n__pycache__/\n")
        (root / "registrations" / f"{LINE}.toml").write_text(REGISTRATION)
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "user.email", "test@example.com")
        git(root, "config", "user.name", "test")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "register")
        for args in (("register", f"registrations/{LINE}.toml"), ("sweep", LINE), ("verdict", LINE)):
            res = subprocess.run([sys.executable, "-m", "harness", *args], cwd=root, capture_output=True, text=True,
                                 env=env, timeout=600)
            print(res.stdout, res.stderr)
            if res.returncode not in (0, 1):
                raise SystemExit(f"bench {' '.join(args)} failed ({res.returncode})")
        shutil.copy(root / "ledger" / f"{LINE}.jsonl", HERE / f"{LINE}.jsonl")
    print(f"wrote {HERE / (LINE + '.jsonl')}")


if __name__ == "__main__":

    main()
