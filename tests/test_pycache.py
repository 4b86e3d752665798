"""No bytecode outside bench's private cache is read by a bench process (issue 47): a ``.pyc``
planted beside ``harness/__init__.py`` ran in the driver and in every worker before any check,
and made the baseline slower. ``bench``, ``python -m harness`` and every Python they start read
bytecode only from bench's private cache (harness/pycache.py, set at start-up by the ``.pth``
that ``pip install`` puts in site-packages); a process started otherwise is refused."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness import pycache
from tests.conftest import TINY, copy_project, git, init_repo, tree_pyc
from tests.test_provenance import _with_code, commit_all

# What every planted .pyc adds to its module's code: one line in the marker file naming the
# module and the process (its command line), appended, so that no run can hide another's.
MARK = ("import os as _o, sys as _s\n"
        "_f = _o.open({marker!r}, _o.O_WRONLY | _o.O_CREAT | _o.O_APPEND)\n"
        "_o.write(_f, (__name__ + ' ' + ' '.join(_s.orig_argv[1:4]) + '\\n').encode())\n"
        "_o.close(_f)\n")
# The modules planted: the package Python imports before any of bench's code, a deeper one,
# and, of the kernels (bench_kernels: the kernels/ folder, which has no __init__.py), the
# baseline the reported attack slowed down.
PLANTED = ("harness/__init__.py", "harness/cli/__init__.py", "kernels/torch_stack.py")
# pyc flags (PEP 552): 0 = validated by the source's mtime and size; 1 = hash-based, never checked.
TIMESTAMP, UNCHECKED_HASH = 0, 1


def _u32(n: int) -> bytes:
    return (n & 0xFFFFFFFF).to_bytes(4, "little")


def planted_pyc(src: Path, marker: Path, flags: int = TIMESTAMP) -> bytes:
    """A .pyc that Python takes for ``src``'s (its header matches ``src``'s mtime and size, or
    is never checked) and that runs ``src``'s code plus a line that writes to ``marker``."""
    code = compile(src.read_text() + "\n" + MARK.format(marker=str(marker)), str(src), "exec", dont_inherit=True)
    st = src.stat()
    rest = _u32(int(st.st_mtime)) + _u32(st.st_size) if flags == TIMESTAMP else \
        importlib.util.source_hash(src.read_bytes())
    return importlib.util.MAGIC_NUMBER + _u32(flags) + rest + marshal.dumps(code)


def _env(**extra: str) -> dict:
    """The test's environment without bench's cache (conftest sets it for the tests' processes)
    and without PYTHONPATH: whatever sets the cache below is the only thing that does."""
    env = {k: v for k, v in os.environ.items() if k not in (pycache.PREFIX_ENV, "PYTHONPATH")}
    return {**env, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **extra}


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=_env() if env is None else env)


def _bare_python(venv: Path) -> Path:
    """The python of a new venv that sees this interpreter's packages (torch, setuptools)
    through a path line, so that no .pth file of this environment runs in it (an installed
    bench's neither)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True,
                   timeout=300)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "base-env.pth").write_text("".join(f"{p}\n" for p in here))
    return venv / "bin" / "python"


def _installed(tmp_path: Path) -> tuple[Path, Path]:
    """(the clone, its venv's python): a committed repository with this project's code and the
    tiny line, installed with ``pip install -e`` into a bare venv. No network, no wheel
    package: the build uses this environment's setuptools."""
    clone = init_repo(copy_project(tmp_path / "proj"), {"tiny": TINY})
    python = _bare_python(tmp_path / "venv")
    r = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-build-isolation",
              "--no-compile", "-e", clone], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(clone, "status", "--porcelain") == ""  # the install left nothing in the checkout
    r = _run([python, "-m", "harness", "register", "tiny"], clone)
    assert r.returncode == 0, r.stdout + r.stderr
    commit_all(clone, "register tiny")
    return clone, python


def _marks(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


def test_bench_is_told_from_other_programs_by_its_command_line():
    # (sys.argv as Python sets it while .pth files run — "-m" stands for the module and its
    # name — and sys.orig_argv), as printed by a .pth of a real interpreter.
    started = [
        (["-m", "sweep", "tiny"], ["python", "-m", "harness", "sweep", "tiny"], True),
        (["-m", "sweep"], ["python", "-mharness", "sweep"], True),
        (["-m", "--version"], ["python", "-X", "dev", "-um", "harness", "--version"], True),
        (["-m", "spec.json"], ["python", "-m", "harness.execution.profile_worker", "spec.json"], True),
        (["/venv/bin/bench", "sweep"], ["/venv/bin/python3", "/venv/bin/bench", "sweep"], True),
        (["-m", "install", "harness"], ["python", "-m", "pip", "install", "harness"], False),
        (["-m"], ["python", "-m", "harnessing"], False),
        (["-c"], ["python", "-c", "import harness"], False),
        (["/x/benchmark", "harness"], ["python", "/x/benchmark", "harness"], False),
        ([], [], False),
    ]
    for argv, orig_argv, bench in started:
        assert pycache.started_as_bench(argv, orig_argv) is bench, orig_argv


@pytest.mark.slow
def test_a_pyc_planted_beside_harness_never_runs_in_bench_nor_python_m_harness(tmp_path):
    clone, python = _installed(tmp_path)
    marker = tmp_path / "PLANTED_RAN"
    for rel in PLANTED:
        pyc = tree_pyc(clone / rel)
        pyc.parent.mkdir(exist_ok=True)
        pyc.write_bytes(planted_pyc(clone / rel, marker))
    # Python itself runs them: an interpreter started for anything but bench reads them (and
    # the .pth leaves it as it was: no cache of bench's).
    r = _run([python, "-c", "import sys, harness; print(sys.pycache_prefix)"], clone)
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stdout + r.stderr
    assert _marks(marker).startswith("harness -c"), _marks(marker)
    marker.unlink()
    led = clone / "ledger" / "tiny.jsonl"
    before = led.read_bytes()
    for entry in ([python, "-m", "harness"], [python.parent / "bench"]):
        r = _run([*entry, "sweep", "tiny", "--no-ceilings"], clone)
        assert _marks(marker) == "", f"planted bytecode ran under {entry[-1]}: {_marks(marker)}"
        # Never read, and refused by name before anything runs: no commit holds it.
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
        assert f"harness/__pycache__/__init__.{sys.implementation.cache_tag}.pyc" in r.stderr, r.stderr
        assert led.read_bytes() == before
    assert pycache.not_private(pycache.private_cache()) is None


# A committed module of kernels/ that plants a .pyc for harness/__init__.py when it is imported
# (kernel discovery imports it in the driver, after the driver's code checks), and a kernel
# that kills its worker: the worker started in its place starts after the plant.
PLANTER = '''\
"""tests/test_pycache.py: bytecode for harness/__init__.py, planted once the driver runs."""
import os
import pathlib
import signal

from harness import kernel

_target = pathlib.Path({target!r})
_target.parent.mkdir(exist_ok=True)
_target.write_bytes(pathlib.Path({pyc!r}).read_bytes())


@kernel("dies", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
def dies(q, k, v, out, *, causal, scale):
    os.kill(os.getpid(), signal.SIGKILL)
'''
PLANTING_LINE = TINY.replace('candidate = "sdpa"', 'candidates = ["dies", "sdpa"]')


def _planting_line(clone: Path, cmd: list, tmp_path: Path, marker: Path) -> None:
    """Register and commit the line ``plants`` (candidates ``dies`` and ``sdpa``), whose
    kernels' module plants a .pyc matching ``clone``'s harness/__init__.py."""
    init = clone / "harness" / "__init__.py"
    prebuilt = tmp_path / "init.pyc"
    prebuilt.write_bytes(planted_pyc(init, marker))
    (clone / "kernels" / "plants_bytecode.py").write_text(PLANTER.format(target=str(tree_pyc(init)),
                                                                         pyc=str(prebuilt)))
    (clone / "registrations" / "plants.toml").write_text(PLANTING_LINE)
    commit_all(clone, "a module that plants bytecode")
    r = _run([*cmd, "register", "plants"], clone)
    assert r.returncode == 0, r.stdout + r.stderr
    tree_pyc(init).unlink()  # register imported the kernels, so planted it: the sweep starts clean
    commit_all(clone, "register plants")


def _after_planting(clone: Path, r: subprocess.CompletedProcess, marker: Path) -> None:
    assert tree_pyc(clone / "harness" / "__init__.py").is_file()  # it was planted
    assert _marks(marker) == "", f"planted bytecode ran: {_marks(marker)}"
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in (clone / "ledger" / "plants.jsonl").read_text().splitlines()]
    # dies killed its worker in each config: the sweep went on in one started after the plant
    assert {(row["candidate"], row["kind"]) for row in rows if row["kind"] != "registered"} >= {("dies", "crashed")}


def _code_clone(tmp_path: Path) -> Path:
    return _with_code(init_repo(tmp_path / "proj", {"tiny": TINY}))


def _guarded(tmp_path: Path) -> tuple[Path, list]:
    """(a committed clone with the code, the command that runs its bench with bench's cache set
    by ``-X pycache_prefix``, which Python passes on to no process it starts, in a venv where
    no .pth sets it)."""
    python = _bare_python(tmp_path / "venv")
    return _code_clone(tmp_path), [python, "-X", f"pycache_prefix={pycache.private_cache()}", "-m", "harness"]


@pytest.mark.slow
@pytest.mark.parametrize("started", ["by the .pth of an editable install", "with -X pycache_prefix"])
def test_workers_started_after_a_pyc_is_planted_never_run_it(tmp_path, started):
    """The driver's cache reaches the workers it spawns, however it was set."""
    if started == "with -X pycache_prefix":
        clone, cmd = _guarded(tmp_path)
    else:
        clone, python = _installed(tmp_path)
        cmd = [python, "-m", "harness"]
    marker = tmp_path / "PLANTED_RAN"
    _planting_line(clone, cmd, tmp_path, marker)
    r = _run([*cmd, "sweep", "plants", "--no-ceilings"], clone)
    _after_planting(clone, r, marker)


@pytest.mark.slow
def test_ray_actors_started_after_a_pyc_is_planted_never_run_it(tmp_path):
    """A Ray actor is no child of the driver (its cluster's processes started without bench's
    cache here): it gets the cache from its runtime_env, before its Python starts."""
    ray = pytest.importorskip("ray")
    clone, cmd = _guarded(tmp_path)
    marker = tmp_path / "PLANTED_RAN"
    _planting_line(clone, cmd, tmp_path, marker)
    saved = dict(os.environ)
    os.environ.pop(pycache.PREFIX_ENV)
    os.environ["PYTHONPATH"] = str(clone)  # the cluster's workers import the clone's code
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        env = _env(**{k: os.environ[k] for k in ("RAY_AUTH_MODE",) if k in os.environ})
        r = _run([*cmd, "sweep", "plants", "--device", "cpu", "--no-ceilings", "--executor", "ray",
                  "--address", ray.get_runtime_context().gcs_address], clone, env)
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)
    _after_planting(clone, r, marker)


# -- started without the cache ---------------------------------------------------------------------

def _private_cache_in(xdg: Path, mode: int = 0o700) -> dict:
    """The environment of a bench whose private cache lies under ``xdg`` (made with ``mode``)."""
    (xdg / "bench" / "pycache").mkdir(parents=True)
    (xdg / "bench" / "pycache").chmod(mode)
    return {"XDG_CACHE_HOME": str(xdg), pycache.PREFIX_ENV: str(xdg / "bench" / "pycache")}


@pytest.mark.parametrize("how, says", [
    ("no cache", "sys.pycache_prefix is unset"),
    ("another cache", "sys.pycache_prefix is {other}, not {private}"),
    ("a cache others may enter", "is not private (its mode is 0755, not 0700)"),
    ("set after harness was imported", "harness was imported before bench's bytecode cache was set"),
    ("a cache inside the repository", "lies inside the repository"),
])
def test_bench_started_without_its_private_cache_is_refused_and_writes_nothing(tmp_path, how, says):
    """`python -c` runs bench's own code, but no .pth sets the cache for it (nor for `python -m
    harness` where bench is not installed)."""
    clone = _code_clone(tmp_path)
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    run = "from harness.cli import run; run()"
    cmd, env = {
        "no cache": (["-c", run], _env()),
        "another cache": (["-X", f"pycache_prefix={other}", "-c", run], _env()),
        "a cache others may enter": (["-c", run], _env(**_private_cache_in(tmp_path / "xdg", 0o755))),
        "set after harness was imported": (
            ["-c", f"import sys, harness; sys.pycache_prefix = {pycache.private_cache()!r}; {run}"], _env()),
        "a cache inside the repository": (["-c", run], _env(**_private_cache_in(clone / ".cache"))),
    }[how]
    status = git(clone, "status", "--porcelain", "--ignored")
    # Python itself would write bytecode beside the sources it imports before the refusal:
    # not asked to, so that anything written is bench's.
    r = _run([sys.executable, *cmd, "register", "tiny"], clone, {**env, "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert says.format(other=other, private=pycache.private_cache()) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert git(clone, "status", "--porcelain", "--ignored") == status
    assert not (clone / "ledger" / "tiny.jsonl").exists()


def test_the_private_cache_is_created_for_this_user_alone_and_a_shared_one_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(sys, "pycache_prefix", sys.pycache_prefix)
    monkeypatch.setenv(pycache.PREFIX_ENV, os.environ[pycache.PREFIX_ENV])
    path = pycache.private_cache()
    assert path == str(tmp_path / "xdg" / "bench" / "pycache")
    assert pycache.install() is None
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700 and os.lstat(path).st_uid == os.getuid()
    assert sys.pycache_prefix == path and os.environ[pycache.PREFIX_ENV] == path
    shutil.rmtree(path)
    os.symlink(tmp_path, path)
    assert pycache.install() == "it is a symbolic link"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # XDG: a relative value is ignored
    assert pycache.private_cache() == os.path.join(os.path.expanduser("~"), ".cache", "bench", "pycache")


# -- bisect probes ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_bisect_probe_never_runs_bytecode_its_commit_holds(tmp_path):
    """A probe runs `python -m harness probe` in a worktree of the probed commit: bytecode that
    commit holds never runs there, whatever started the bisect (here `-X pycache_prefix`, in a
    venv where no .pth sets the cache: Python passes it on to no process it starts)."""
    from tests.test_bisect import KERNEL, LINE, REGISTRATION

    root = init_repo(tmp_path / "proj", {LINE: REGISTRATION})
    for pkg in ("harness", "kernels"):
        shutil.copytree(Path(__file__).resolve().parents[1] / pkg, root / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (root / "kernels" / "planted.py").write_text(KERNEL.format(revision=0, extra=0.0))
    commit_all(root, "the code")
    guarded = [_bare_python(tmp_path / "venv"), "-X", f"pycache_prefix={pycache.private_cache()}", "-m", "harness"]
    r = _run([*guarded, "register", LINE], root)
    assert r.returncode == 0, r.stdout + r.stderr
    commit_all(root, "register")
    # The good end holds bytecode for harness/__init__.py (and a kernel that does not import,
    # so its probe ends early); the bad end neither.
    marker = tmp_path / "PLANTED_RAN"
    init = root / "harness" / "__init__.py"
    tree_pyc(init).parent.mkdir()
    tree_pyc(init).write_bytes(planted_pyc(init, marker, UNCHECKED_HASH))
    (root / "kernels" / "planted.py").write_text("def planted(:\n")
    git(root, "add", "-f", str(tree_pyc(init)))
    commit_all(root, "bytecode, and a kernel that does not import")
    good = git(root, "rev-parse", "HEAD")
    git(root, "rm", "-q", "--cached", str(tree_pyc(init)))
    tree_pyc(init).unlink()
    (root / "kernels" / "planted.py").write_text(KERNEL.format(revision=1, extra=0.0))
    commit_all(root, "no bytecode; the kernel imports again")
    r = _run([*guarded, "bisect", LINE, "n128", "--good", good, "--bad", "HEAD", "--device", "cpu"], root)
    assert _marks(marker) == "", f"the commit's bytecode ran: {_marks(marker)}"
    assert r.returncode == 1 and "the good end could not be measured" in r.stdout, r.stdout + r.stderr
