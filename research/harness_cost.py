"""The harness's own cost (issue 32): a registered line swept through the real CLI, against the
timer a user would otherwise run on the same arms and configs.

Run from the repository root, on the GPU machine or a CPU host:

    PYTHONUNBUFFERED=1 python3 -m research.harness_cost [--verdict] LINE [LINE ...]

For each line (default: ``example``) it copies the registration into a scratch git repository
under a temporary directory (with this checkout's device ceilings, so none are measured; this
repository's ledger is not touched), registers it as ``cost-LINE`` and sweeps it with
``python3 -m harness`` (bench from this checkout), timing the sweep's wall clock. Then, in this
process, it times the same arms at the same configs the way a user would without bench — the
baseline, each candidate and the baseline again (the control): ``triton.testing.do_bench``
(median of its default 25 ms warm-up and 100 ms of calls, L2 flushed) on a GPU, a bare
``perf_counter`` loop of the same length on the CPU — inputs made once per config. It reports,
per config, the sweep's wall time, the bare timer's (its loops over the configs), their ratio,
the ratio of the two whole processes' wall times (each with its start-up and imports; the
sweep's time always held its own), and the sweep's own phase breakdown (each row's ``cost``; a rig-noisy config measured again counts in its config's
share, as in the wall time). Writes ``harness_cost.md`` and ``harness_cost.json`` under
``$OUT`` (or ``--out``, else the current directory), with each scratch sweep's ledger
(``cost-LINE.jsonl``) and output (``cost-LINE.sweep.log``), so a row's reason outlives the run.

Compilation is paid alike: the bare timer runs in a fresh process of its own, once before
the sweep (untimed for the ratio: it fills Triton's on-disk cache, as a user's first run
would, and its time is reported as the first run's) and once after it (the denominator).
The sweep and the second bare run thus both find the main shapes' kernels compiled and both
autotune in their own process; what the sweep compiles beyond them (its boundary shapes)
is its own cost.

With ``--warm`` the sweep runs after ``bench warm`` in the scratch repository, as a user runs an
overnight grid (the boundary shapes' Triton compiles, which no bare timer makes, then load from
the on-disk cache instead of compiling inside the sweep): ``bench warm``'s wall time is reported
beside the bare timer's first run, and a second ratio counts it in the sweep's time.

With ``--verdict`` it also evaluates the bar on the scratch ledger (``bench verdict
--no-commit``: nothing written) and compares the verdict and every speedup with this
repository's ledger of the line (issue 32: a faster harness moves no verdict).

The figures are measurements of the harness, not of kernels: no verdict comes from them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A bench call's own limit (register's canaries, then the sweep).
CALL_TIMEOUT_S = 3000
# The bare timer on the CPU: do_bench's default warm-up and measuring window.
WARMUP_MS, REP_MS = 25.0, 100.0


def _bench(cwd: Path, *args: str, profile: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """``python -m harness ARGS`` in ``cwd`` and its wall seconds; under cProfile (its stats
    written to ``profile``) when given."""
    pre = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, *pre, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=CALL_TIMEOUT_S)
    return r, time.perf_counter() - t0


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def scratch_repo(where: Path, line: str) -> str:
    """A git repository holding ``line``'s registration as ``cost-LINE`` and this checkout's
    device ceilings: the line id it registers."""
    name = f"cost-{line}"
    (where / "registrations").mkdir(parents=True)
    (where / "ledger").mkdir()
    text = (ROOT / "registrations" / f"{line}.toml").read_text()
    # A copy amends nothing in the scratch repository (the lines it would amend are not there).
    text = re.sub(r'(?m)^amends\s*=.*\n', "", text)
    (where / "registrations" / f"{name}.toml").write_text(text)
    ceilings = ROOT / "ledger" / "_device_ceilings.jsonl"
    if ceilings.exists():
        shutil.copy(ceilings, where / "ledger" / ceilings.name)
    _git(where, "init", "-q")
    _git(where, "config", "user.email", "bench@example.com")
    _git(where, "config", "user.name", "bench")
    _git(where, "add", "-A")
    _git(where, "commit", "-qm", "a copy of a registered line")
    return name


def bare_in_process(repo: Path, name: str, device: str) -> tuple[dict[str, float], float]:
    """``bare_seconds`` for the line registered in ``repo``, in a fresh Python process (its own
    autotuning, no kernels compiled in this one), and that process's wall seconds (start-up
    and imports included, as the sweep's wall time includes its own)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "research.harness_cost", "--bare", str(repo / "registrations" / f"{name}.toml"),
                        "--device", device], cwd=ROOT, capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"the bare timer failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1]), wall


def bare_seconds(reg, device: str) -> dict[str, float]:
    """Per config key: the wall seconds a user's own timer takes on the line's arms there."""
    import torch

    from harness import get_kernel, make_inputs

    out = {}
    arms = [reg.baseline, *reg.candidates, reg.baseline]  # the control: the baseline again
    for cfg in reg.configs:
        t0 = time.perf_counter()
        q, k, v = make_inputs(cfg, 0, "normal", device)
        for name in arms:
            spec = get_kernel(name)
            if spec.unusable_reason(device) or spec.config_reason(cfg):
                continue
            o = torch.empty_like(q)

            def call(fn=spec.fn, q=q, k=k, v=v, o=o):
                fn(q, k, v, o, causal=cfg.causal, scale=cfg.scale)

            if device == "cuda":
                import triton

                triton.testing.do_bench(call, return_mode="median")
            else:
                _host_loop(call)
        if device == "cuda":
            torch.cuda.synchronize()
        out[cfg.key()] = time.perf_counter() - t0
        del q, k, v
    return out


def _host_loop(call) -> float:
    """Median ms of ``call`` after WARMUP_MS of calls, over REP_MS of calls (do_bench's window)."""
    end = time.perf_counter() + WARMUP_MS / 1e3
    while time.perf_counter() < end:
        call()
    times = []
    end = time.perf_counter() + REP_MS / 1e3
    while time.perf_counter() < end or not times:
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def shipped_comparison(repo: Path, name: str, line: str) -> dict:
    """The scratch sweep's verdict (``bench verdict --no-commit``: nothing written) and speedups
    against this repository's ledger of ``line``: the shipped verdict row's outcome and clause
    values, and per (config, candidate) result the shipped speedup's CI and the new speedup."""
    from harness import latest_outcomes, read_rows

    run, _ = _bench(repo, "verdict", name, "--no-commit")
    outcome = {0: "GO", 1: "NO-GO"}.get(run.returncode, f"refused ({run.returncode})")
    shipped_rows = read_rows(ROOT / "ledger" / f"{line}.jsonl")
    verdicts = [r for r in shipped_rows if r.kind == "verdict"]
    shipped = verdicts[-1] if verdicts else None
    new = latest_outcomes(read_rows(repo / "ledger" / f"{name}.jsonl"))
    old = latest_outcomes(shipped_rows)
    pairs = []
    for key, r in sorted(new.items()):
        o = old.get(key)
        if r.kind != "result" or o is None or o.kind != "result":
            pairs.append({"pair": list(key), "new": r.kind, "shipped": None if o is None else o.kind})
            continue
        m, om = r.metrics, o.metrics
        pairs.append({"pair": list(key), "new": r.kind, "shipped": o.kind, "speedup": m["speedup"],
                      "shipped_speedup": om["speedup"], "shipped_ci": [om["speedup_ci_low"], om["speedup_ci_high"]],
                      "within_shipped_ci": om["speedup_ci_low"] <= m["speedup"] <= om["speedup_ci_high"],
                      "cis_overlap": m["speedup_ci_low"] <= om["speedup_ci_high"] and om["speedup_ci_low"] <= m["speedup_ci_high"],
                      "ratio": m["speedup"] / om["speedup"], "tflops": m.get("tflops"), "shipped_tflops": om.get("tflops")})
    return {"outcome": outcome, "verdict_text": (run.stdout + run.stderr).strip()[-3000:],
            "shipped_outcome": shipped.outcome if shipped else None,
            "shipped_clauses": [{"text": c["text"], "value": c["value"]} for c in shipped.clauses] if shipped else None,
            "pairs": pairs}


def protocol_floor(rows, reg, device: str) -> dict[str, float]:
    """Per config key (configs with result rows): the device seconds the registered protocol
    itself prescribes, from the sweep's own rows, with no host work, input draws or checks
    counted: the gate's calls at the config (every kernel twice per seed × family, at its
    timed median; the boundary shapes' calls left out) and all its float64 references, every
    timed round (warm-up and the priming round included) of every arm, the references of the
    distinct contents the after-timing checks judge (each at the gate's mean time per
    reference over every case it judged, boundary cases included: no more than a main case's),
    the sustained phase's fixed windows where rates are judged, and one recheck call per
    candidate. A lower bound on what any implementation of the same protocol spends."""
    from harness import SUSTAINED_TIMED_S, SUSTAINED_WARM_S

    out: dict[str, float] = {}
    cases = len(reg.seeds) * len(reg.families)
    by_cfg: dict[str, list] = {}
    for r in rows:
        if r.kind == "result" and r.cost:
            by_cfg.setdefault(r.config_key, []).append(r)
    for key, rs in by_cfg.items():
        t = rs[0].timing
        med = {arm: a["stats"]["median"] / 1e3 for arm, a in t["arms"].items()}
        kernels = [m for arm, m in med.items() if arm != "control"]  # baseline and candidates
        refs = rs[0].cost.get("of_which", {}).get("reference", 0.0)
        g = rs[0].gate["baseline"]
        judged = 1 + len(g.get("boundary_configs") or ()) - len(g.get("reused") or ())  # configs whose cases ran here
        per_ref = refs / (cases * max(1, judged)) if cases else 0.0
        rounds = t["n_rounds"] + t["warmup_rounds"] + 1
        ref_rec = t.get("refresh") or {}
        current = [v[0] for v in (ref_rec.get("last_versions") or {}).values() if v]
        contents = ({(c["slot"], c["version"]) for c in t["spot_calls"].values()}
                    | {(c["slot"], c["version"]) for a in (ref_rec.get("checks") or {}).values() for c in a.values()}
                    | {(0, v) for v in current})
        rated = sum(1 for r in rs if r.sustained)  # candidates timed back to back for their rates
        sustained = rated * (SUSTAINED_WARM_S.get(device, 0.0) + SUSTAINED_TIMED_S.get(device, 0.0))
        recheck = sum(m for arm, m in med.items() if arm.startswith("candidate:"))
        out[key] = (2 * cases * sum(kernels) + refs + rounds * sum(med.values()) + (len(contents) + 1) * per_ref
                    + sustained + recheck)
    return out


def _triton_cache() -> Path:
    """Triton's on-disk kernel cache (its default, unless TRITON_CACHE_DIR names another)."""
    return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def _compiled() -> set[Path]:
    """The compiled-kernel metadata files in Triton's cache now (one per kernel and specialization)."""
    cache = _triton_cache()
    return {p for p in cache.glob("*/*.json") if not p.name.startswith("__grp__")} if cache.is_dir() else set()


def compiled_names(paths) -> dict[str, int]:
    """Kernel name -> how many specializations, from Triton cache metadata files."""
    names: dict[str, int] = {}
    for p in paths:
        try:
            name = json.loads(p.read_text()).get("name", p.stem)
        except (OSError, ValueError):
            name = p.stem
        names[name] = names.get(name, 0) + 1
    return dict(sorted(names.items()))


def profile_text(path: Path, top: int = 60) -> str:
    """A cProfile dump's top functions by their own time and by cumulative time."""
    import io
    import pstats

    parts = []
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(str(path), stream=buf).sort_stats(key).print_stats(top)
        parts += [f"## by {key}", buf.getvalue()]
    return "\n".join(parts)


def measure(line: str, device: str, verdict: bool = False, out: Path | None = None, profile: bool = False,
            warm: bool = False) -> dict:
    from harness import OUTCOME_KINDS, load_registration, read_rows

    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp, tempfile.TemporaryDirectory() as scratch:
        repo = Path(tmp)
        name = scratch_repo(repo, line)
        bare_first, _ = bare_in_process(repo, name, device)  # fills the compile cache, as a first run
        reg_run, reg_s = _bench(repo, "register", name)
        if reg_run.returncode != 0:
            raise SystemExit(f"register {name} failed ({reg_run.returncode}): {reg_run.stderr.strip()[-2000:]}")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "registered")
        warm_s = None
        if warm:
            wr, warm_s = _bench(repo, "warm", name)
            if wr.returncode != 0:
                raise SystemExit(f"warm {name} failed ({wr.returncode}): {wr.stdout[-2000:]}{wr.stderr[-2000:]}")
        prof = Path(scratch) / f"{name}.prof" if profile else None  # outside the repository: its tree stays clean
        # Profiled, the configs run in the sweep's own process (--inline), where cProfile sees them.
        cached = _compiled()
        sw, sweep_s = _bench(repo, "sweep", name, *(["--inline"] if profile else []), profile=prof)
        # What the sweep compiled itself (kernels no first run or `bench warm` had compiled).
        compiled = compiled_names(_compiled() - cached)
        if sw.returncode != 0:
            raise SystemExit(f"sweep {name} failed ({sw.returncode}): {sw.stdout[-2000:]}{sw.stderr[-2000:]}")
        if out is not None:  # the scratch sweep's rows and output outlive its temporary directory
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy(repo / "ledger" / f"{name}.jsonl", out / f"{name}.jsonl")
            (out / f"{name}.sweep.log").write_text(sw.stdout + sw.stderr)
            if prof is not None:
                (out / f"{name}.profile.txt").write_text(profile_text(prof))
                shutil.copy(prof, out / f"{name}.prof")  # the raw dump, for pstats queries beyond the top
        rows = [r for r in read_rows(repo / "ledger" / f"{name}.jsonl") if r.kind in OUTCOME_KINDS]
        reg = load_registration(repo / "registrations" / f"{name}.toml")
        against = shipped_comparison(repo, name, line) if verdict else None
        bare, bare_wall = bare_in_process(repo, name, device)
    # Every config run (re-measures of rig-noisy pairs included: the sweep's wall time holds them),
    # once: the rows of one run share one cost.
    costs = {(r.config_key, json.dumps(r.cost, sort_keys=True)): r.cost for r in rows if r.cost}
    n = len(reg.configs)
    phases: dict[str, float] = {}
    for c in costs.values():
        for k, v in c["seconds"].items():
            phases[k] = phases.get(k, 0.0) + v / n
    reference = sum((c.get("of_which") or {}).get("reference", 0.0) for c in costs.values()) / n
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    per_config = sweep_s / n
    bare_per_config = sum(bare.values()) / n
    floor = protocol_floor(rows, reg, device)
    per_key = {key: {"sweep_s": next(c["total"] for (k, _), c in costs.items() if k == key), "bare_s": bare.get(key),
                     "protocol_floor_s": floor.get(key)} for key in sorted({k for k, _ in costs})}
    floored_bare = sum(bare.get(k, 0.0) for k in floor)  # the same configs on both sides
    return {"line": line, "device": device, "profiled": profile, "configs": n, "runs": len(costs), "arms": 2 + len(reg.candidates),
            "register_s": reg_s,
            "sweep_s": sweep_s, "sweep_per_config_s": per_config, "bare_per_config_s": bare_per_config,
            "bare_first_run_per_config_s": sum(bare_first.values()) / n,
            "warm_s": warm_s, "ratio_with_warm": None if warm_s is None else (sweep_s + warm_s) / n / bare_per_config,
            "bare_process_per_config_s": bare_wall / n, "ratio_process": sweep_s / bare_wall,
            "protocol_floor_per_config_s": sum(floor.values()) / len(floor) if floor else None,
            "ratio_floor": sum(floor.values()) / floored_bare if floored_bare else None, "per_config": per_key,
            "ratio": per_config / bare_per_config, "phases_per_config_s": phases,
            "reference_per_config_s": reference, "outcomes": kinds,
            "cost_line": next((x.strip() for x in sw.stdout.splitlines() if "harness time per config" in x), None),
            "compiled_in_sweep": compiled, "against_shipped": against}


def markdown(results: list[dict], commit: str) -> str:
    shown = commit if commit.startswith("(") else commit[:12]  # "(a tree …)" whole, a hash short
    out = [f"## The harness's own cost at `{shown}`", "",
           "| line | device | configs × arms (runs) | sweep s / config | bare timer s / config (its first run) | ratio | phases s / config |",
           "|---|---|---|---|---|---|---|"]
    for r in results:
        ph = ", ".join(f"{k} {v:.2f}" for k, v in r["phases_per_config_s"].items())
        ph += (f"; the bare timer's whole process (start-up and imports, as the sweep's) "
               f"{r['bare_process_per_config_s']:.2f} s / config: {r['ratio_process']:.1f}×")
        if r.get("ratio_floor") is not None:
            ph += (f"; the protocol's own device work (protocol_floor, configs with results) "
                   f"{r['protocol_floor_per_config_s']:.2f} s / config: {r['ratio_floor']:.1f}× the bare timer")
        if r.get("warm_s") is not None:
            ph += (f"; after `bench warm` ({r['warm_s']:.1f} s; counted in the sweep's time: "
                   f"{r['ratio_with_warm']:.1f}×)")
        if r.get("compiled_in_sweep"):
            ph += "; Triton kernels the sweep compiled itself: " + ", ".join(
                f"{k} ×{v}" for k, v in r["compiled_in_sweep"].items())
        out.append(f"| {r['line']} | {r['device']} | {r['configs']} × {r['arms']} ({r['runs']}) | "
                   f"{r['sweep_per_config_s']:.2f} | "
                   f"{r['bare_per_config_s']:.2f} ({r['bare_first_run_per_config_s']:.2f}) | **{r['ratio']:.1f}×** | {ph}; float64 references "
                   f"{r['reference_per_config_s']:.2f} |")
    return "\n".join(out) + "\n"


def tree_commit(root: Path) -> str:
    """The commit the measured tree is, or what it is instead. A copy without its .git names no
    commit; a copy beside a stale .git (the device keeps one between sessions) differs from
    that .git's HEAD, and is named as such rather than as that commit."""
    if not (root / ".git").exists():
        return "(a tree without .git)"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    return f"(a tree that differs from {head[:12]})" if dirty else head


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lines", nargs="*", default=["example"])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--bare", metavar="REGISTRATION",
                    help="only time the registration's arms with the bare timer in this process; print JSON "
                         "(config key -> seconds); used by the measurement itself")
    ap.add_argument("--device", help="with --bare: the device (default: detected)")
    ap.add_argument("--profile", action="store_true",
                    help="sweep in one process (--inline) under cProfile; its top functions go to OUT/cost-LINE.profile.txt "
                         "(the profiler's own overhead is in that run's times)")
    ap.add_argument("--warm", action="store_true",
                    help="run `bench warm` before the sweep (its wall time reported, and a ratio that counts it)")
    ap.add_argument("--verdict", action="store_true",
                    help="also evaluate the bar on the scratch sweep (nothing written) and compare its verdict and "
                         "speedups with this repository's ledger of the line (issue 32: no verdict moves)")
    args = ap.parse_args(argv)
    from harness import detect_device

    device = args.device or detect_device()
    if args.bare:
        from harness import load_registration

        print(json.dumps(bare_seconds(load_registration(Path(args.bare)), device)))
        return 0
    commit = tree_commit(ROOT)
    if args.warm and device != "cuda":
        print(f"--warm: nothing compiles ahead on {device} (bench warm warms Triton's GPU cache); the sweep runs as is",
              flush=True)
    results = []
    for line in args.lines:
        r = measure(line, device, verdict=args.verdict, out=Path(args.out), profile=args.profile,
                    warm=args.warm and device == "cuda")
        results.append(r)
        print(f"{line} on {device}: {r['configs']} configs, sweep {r['sweep_s']:.1f} s "
              f"({r['sweep_per_config_s']:.2f} s/config) vs bare timer {r['bare_per_config_s']:.2f} s/config: "
              f"{r['ratio']:.1f}×\n  {r['cost_line']}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    Path(args.out, "harness_cost.json").write_text(json.dumps({"commit": commit, "results": results}, indent=1))
    Path(args.out, "harness_cost.md").write_text(markdown(results, commit))
    print(markdown(results, commit))
    for r in results:
        a = r.get("against_shipped")
        if a is None:
            continue
        measured = [p for p in a["pairs"] if "speedup" in p]
        print(f"{r['line']}: verdict {a['outcome']} (shipped {a['shipped_outcome']}); "
              f"{sum(p['within_shipped_ci'] for p in measured)}/{len(measured)} speedups inside the shipped CI, "
              f"{sum(p['cis_overlap'] for p in measured)}/{len(measured)} CIs overlapping, new/shipped "
              f"{min((p['ratio'] for p in measured), default=float('nan')):.4f}..{max((p['ratio'] for p in measured), default=float('nan')):.4f}")
        print("  shipped clauses:", a["shipped_clauses"])
        print("  " + a["verdict_text"].replace("\n", "\n  "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
