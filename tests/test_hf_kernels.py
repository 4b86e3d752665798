"""bench beside Hugging Face's `kernels` package in one environment.

Both are installed (regular installs, not editable) into one virtual environment: bench's
shipped kernels import as ``bench_kernels``, so bench claims no top-level ``kernels`` and
neither package shadows the other. A line named ``example`` (tests' TINY grid, as the other
scratch-repository sweeps use: seconds on a CPU) sweeps there from a repository of
registrations and ledgers only, and HF's loader imports in the same environment. CI reaches a
package index; where `pip download kernels` cannot (offline), the test skips and says so.

A checkout shadows nothing either: its kernels/ folder has no ``__init__.py``, so ``import
kernels`` at the repository root (``python -c``, or a process that loaded bench's kernels) gets
an installed ``kernels`` (a stub of HF's, here) and ``python -m harness`` still finds bench's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import KERNELS_PACKAGE, __version__
from harness.ledger.store import read_rows
from tests.conftest import TINY, build_wheel, copy_project, git, init_repo

# Hugging Face's kernel loader: its PyPI name and its top-level import name.
HF_KERNELS = "kernels"
# pip and venv steps read a package index; each bench command is a hang guard.
PIP_TIMEOUT_S = 600
BENCH_TIMEOUT_S = 600
OUTCOME_KINDS = ("result", "skipped", "incorrect", "throttled", "crashed", "unsupported")


def _hf_wheel(dest: Path) -> Path:
    """HF `kernels`' wheel from the package index, or skip with the reason."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", HF_KERNELS, "-d", str(dest)],
                       capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    wheels = sorted(dest.glob(f"{HF_KERNELS}-*.whl"))
    if r.returncode != 0 or not wheels:
        said = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
        pytest.skip(f"`pip download {HF_KERNELS}` is impossible here (no package index reachable): {said}")
    return wheels[0]


def _venv(where: Path) -> Path:
    """A venv that sees this interpreter's packages (torch and bench's other dependencies: its
    site directories, named in a .pth file) and holds no pip of its own (pip runs from outside
    with ``--python``). Not ``--system-site-packages``: run from a venv, as the README's set-up
    may be, that gives the base interpreter's packages, which may lack them."""
    import site

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True,
                   timeout=PIP_TIMEOUT_S)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    (Path(purelib) / "_tested_interpreter.pth").write_text("".join(f"{d}\n" for d in dirs))
    return python


def _pip(python: Path, *args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile", *args],
                       capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr


def _run(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -P``: nothing from the working directory or PYTHONPATH, only the environment."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONUNBUFFERED="1", COLUMNS="200")
    return subprocess.run([str(python), "-P", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=BENCH_TIMEOUT_S)


# One process imports HF's loader first, then discovers bench's kernels: each keeps its name.
BOTH = textwrap.dedent(f'''\
    import json, sys
    import {HF_KERNELS} as hf
    from harness import load_kernels
    ks = load_kernels()
    print(json.dumps({{"hf": hf.__file__, "hf_get_kernel": callable(getattr(hf, "get_kernel", None)),
                      "still_hf": sys.modules["{HF_KERNELS}"] is hf,
                      "bench": sys.modules["{KERNELS_PACKAGE}"].__file__, "kernels": sorted(ks)}}))
    ''')


@pytest.mark.slow
def test_bench_installs_and_sweeps_the_example_beside_hugging_face_kernels(tmp_path):
    wheel = _hf_wheel(tmp_path / "wheels")
    python = _venv(tmp_path / "venv")
    _pip(python, str(wheel))  # with its dependencies, from the index
    # bench's wheel, installed as pip installs a release (an editable bench this interpreter may
    # have is seen through the .pth: --ignore-installed leaves it alone).
    _pip(python, "--no-deps", "--ignore-installed", str(build_wheel(copy_project(tmp_path / "src"), tmp_path / "dist")))
    site = Path(_run(python, tmp_path, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .stdout.strip())

    # bench's installed files: harness/ and bench_kernels/, never a top-level kernels/.
    record = (site / f"bench-{__version__}.dist-info" / "RECORD").read_text().splitlines()
    tops = {line.split(",")[0].split("/")[0] for line in record}
    assert {"harness", KERNELS_PACKAGE} <= tops and HF_KERNELS not in tops, sorted(tops)

    r = _run(python, tmp_path, "-c", BOTH)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert Path(seen["hf"]).parent == site / HF_KERNELS and seen["hf_get_kernel"] and seen["still_hf"], seen
    assert Path(seen["bench"]).parent == site / KERNELS_PACKAGE, seen
    assert {"sdpa", "torch_stack"} <= set(seen["kernels"]), seen

    # The example line, swept by the installed bench from a repository of registrations only.
    proj = init_repo(tmp_path / "proj", {"example": TINY})
    r = _run(python, proj, "-m", "harness", "register", "example")
    assert r.returncode == 0, r.stdout + r.stderr
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "register example")
    r = _run(python, proj, "-m", "harness", "sweep", "example")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_rows(proj / "ledger" / "example.jsonl")
    outcomes = [row for row in rows if row.kind in OUTCOME_KINDS]
    # Both configs have their outcome rows (a loaded host may skip timing: still an outcome).
    assert len({row.config_key for row in outcomes}) == 2, [row.kind for row in rows]
    for row in outcomes:
        assert {c["package"] for c in row.code} == {"harness", KERNELS_PACKAGE}, row.code
        assert all((c["name"], c["editable"]) == ("bench", False) for c in row.code), row.code
        for src in (row.kernel_sources or {}).values():
            assert src["path"].startswith(f"{KERNELS_PACKAGE}/"), src
    assert git(proj, "status", "--porcelain") == ""  # every row committed


# -- the checkout shadows nothing: `import kernels` at the repository root -------------------------

# A stand-in for Hugging Face's loader: a regular package named `kernels`, as its wheel installs.
HF_STUB = '"""A stub of Hugging Face\'s kernel loader."""\nSTUB = True\n\n\ndef get_kernel(repo_id):\n    raise NotImplementedError\n'
# At the repository root, in a process that has loaded bench's kernels too, as `python -m harness` does.
WHICH = textwrap.dedent('''\
    import json, sys
    import harness
    ks = harness.load_kernels()
    import kernels
    print(json.dumps({"kernels": kernels.__file__, "stub": getattr(kernels, "STUB", False),
                      "bench": list(sys.modules["bench_kernels"].__path__), "loaded": sorted(ks)}))
    ''')


def _stub(site: Path) -> Path:
    (site / HF_KERNELS).mkdir(parents=True)
    (site / HF_KERNELS / "__init__.py").write_text(HF_STUB)
    return site / HF_KERNELS / "__init__.py"


@pytest.mark.parametrize("where", ["PYTHONPATH", "site-packages"])
def test_import_kernels_at_the_repository_root_gets_hugging_faces_not_the_kernels_folder(tmp_path, where):
    from tests.conftest import REPO

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if where == "PYTHONPATH":
        python, stub = Path(sys.executable), _stub(tmp_path / "path")
        env["PYTHONPATH"] = str(tmp_path / "path")
    else:  # installed: in the site-packages of a venv that sees this interpreter's packages
        python = _venv(tmp_path / "venv")
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        stub = _stub(Path(purelib))
    r = subprocess.run([str(python), "-c", "import kernels; print(kernels.__file__)"], cwd=REPO, capture_output=True,
                       text=True, env=env, timeout=BENCH_TIMEOUT_S)
    assert r.returncode == 0 and Path(r.stdout.strip()) == stub, r.stdout + r.stderr
    r = subprocess.run([str(python), "-c", WHICH], cwd=REPO, capture_output=True, text=True, env=env,
                       timeout=BENCH_TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert Path(seen["kernels"]) == stub and seen["stub"], seen
    assert seen["bench"] == [str(REPO / "kernels")] and {"sdpa", "torch_stack"} <= set(seen["loaded"]), seen
    # `python -m harness` at the root: bench's kernels found, beside the stub.
    r = subprocess.run([str(python), "-m", "harness", "kernels"], cwd=REPO, capture_output=True, text=True,
                       env={**env, "COLUMNS": "200"}, timeout=BENCH_TIMEOUT_S)
    assert r.returncode == 0 and "torch_stack" in r.stdout and "kernels/torch_stack.py" in r.stdout, r.stdout + r.stderr
