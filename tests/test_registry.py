"""Kernel discovery: broken kernels are errors naming their file; plugins register by entry point."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import kernel
from harness.errors import UserError
from tests.conftest import REPO, installed_dist

LIST = "from harness import load_kernels; print(sorted(load_kernels()))"


def _python(code: str, *paths: Path, isolated: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` with ``paths`` first on sys.path. ``isolated`` skips site-packages, so an
    editable install of this checkout cannot shadow a copied source tree."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO)])}
    flags = ["-S"] if isolated else []
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, env=env, cwd=paths[0],
                          timeout=600)  # a hang guard: imports torch, slow on a loaded machine


def test_a_kernel_module_that_fails_to_import_names_its_file(tmp_path):
    # A source tree of its own: its harness imports the kernels/ folder beside it as bench_kernels.
    for folder in ("harness", "kernels"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "kernels" / "broken_kernel.py").write_text("import this_module_does_not_exist\n")
    res = _python(LIST, tmp_path, isolated=True)
    assert res.returncode != 0
    assert "broken_kernel.py failed to import" in res.stderr and "this_module_does_not_exist" in res.stderr


def test_an_entry_point_plugin_is_listed_and_usable(tmp_path):
    code = textwrap.dedent('''\
        from harness import kernel

        @kernel("plugin_copy_of_stack", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
        def plugin(q, k, v, out, *, causal, scale):
            """A plugin kernel (the torch stack under another name)."""
            from bench_kernels.torch_stack import torch_stack
            torch_stack(q, k, v, out, causal=causal, scale=scale)
        ''')
    installed_dist(tmp_path, "myplugin", "0.1", "[bench.kernels]\nmine = myplugin_kernels\n", {"myplugin_kernels": code})
    res = _python(LIST, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "plugin_copy_of_stack" in res.stdout


def test_a_broken_entry_point_names_the_plugin(tmp_path):
    installed_dist(tmp_path, "badplugin", "0.1", "[bench.kernels]\nbad = no_such_plugin_module\n")
    res = _python(LIST, tmp_path)
    assert res.returncode != 0 and "entry point 'bad'" in res.stderr


def test_two_kernels_with_one_name_from_different_files_are_refused():
    def first(q, k, v, out, *, causal, scale):
        pass

    kernel("test_registry_dup", workloads=("attention",), dtypes=("float32",))(first)
    other = type(first)(first.__code__.replace(co_filename="/elsewhere/other.py"), first.__globals__, "other")
    with pytest.raises(UserError, match="registered twice"):
        kernel("test_registry_dup", workloads=("attention",), dtypes=("float32",))(other)


def test_sdpa_cudnn_declares_its_kv_length_1_gap():
    # torch 2.11's cuDNN SDPA raises "No available kernel" at one key; declared, the gate
    # skips that boundary shape instead of recording the whole config as crashed.
    from harness import get_kernel
    from harness.workloads import Config

    spec = get_kernel("sdpa_cudnn")
    assert "sequence length of 1" in spec.config_reason(Config("attention", 1, 2, 2, 1, 64, "float16", False))
    assert spec.config_reason(Config("attention", 1, 2, 2, 67, 64, "float16", False)) is None


def test_the_plugin_api_is_public_in_harness_and_import_harness_loads_no_torch():
    code = ("import sys, harness; loaded = 'harness.registry' in sys.modules; "
            "from harness import kernel, KernelSpec, get_kernel, load_kernels; "
            "print(loaded, 'torch' in sys.modules, sorted({f.__module__ for f in (kernel, KernelSpec, get_kernel, "
            "load_kernels)}))")
    res = _python(code, REPO)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False", "['harness.registry']"], res.stdout


def test_setup_installs_the_kernels_folder_under_the_name_harness_maps_it_to(monkeypatch):
    import runpy

    import harness

    monkeypatch.chdir(REPO)
    setup = runpy.run_path(str(REPO / "setup.py"), run_name="packages")
    assert setup["PACKAGE_DIR"] == {harness.KERNELS_PACKAGE: harness.CODE_PACKAGES[harness.KERNELS_PACKAGE]}
    assert harness.KERNELS_PACKAGE != "kernels" and "kernels" not in setup["PACKAGES"]  # Hugging Face's name


# -- one path: the bench.kernels entry points, bench's own for the shipped kernels ----------------

LOADED = textwrap.dedent('''\
    import json, sys
    from harness import load_kernels
    from harness.registry import kernel_entry_points
    ks = load_kernels()
    ep = kernel_entry_points()[0]
    print(json.dumps({"entry_point": [ep.name, ep.value],
                      "from": str(ep.dist.locate_file("")) if ep.dist is not None else None,
                      "kernels": {n: [s.source, s.distribution] for n, s in ks.items()},
                      "package": getattr(sys.modules["bench_kernels"], "__file__", None),
                      "path": list(sys.modules["bench_kernels"].__path__)}))
    ''')


def test_pyproject_declares_bench_s_own_entry_point_as_the_registry_knows_it():
    import tomllib

    from harness.registry import ENTRY_POINT_GROUP, SHIPPED_ENTRY_POINT

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == dict([SHIPPED_ENTRY_POINT])
    assert not (REPO / "kernels" / "__init__.py").exists()  # the folder is no top-level package


def test_a_checkout_run_without_being_installed_finds_its_own_and_the_user_s_kernels(tmp_path):
    # No site-packages (-S), so no installed metadata: bench's own entry point as pyproject.toml
    # declares it, loading the kernels/ folder beside the running harness, a user's module too.
    import json

    for folder in ("harness", "kernels"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "kernels" / "users_own.py").write_text(textwrap.dedent('''\
        from harness import kernel

        @kernel("users_own", workloads=("attention",), dtypes=("float32",), devices=("cpu",))
        def users_own(q, k, v, out, *, causal, scale):
            """A user's kernel in the kernels/ folder."""
        '''))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # not this checkout, whose bench.egg-info names it
    res = subprocess.run([sys.executable, "-S", "-c", LOADED], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    assert seen["entry_point"] == ["bench", "bench_kernels"] and seen["from"] is None, seen
    assert seen["package"] is None and seen["path"] == [str(tmp_path / "kernels")], seen
    assert {"torch_stack", "sdpa", "users_own"} <= set(seen["kernels"]), seen
    for name in ("torch_stack", "users_own"):
        source, distribution = seen["kernels"][name]
        assert Path(source).parent == tmp_path / "kernels" and distribution is None, (name, source, distribution)


@pytest.mark.slow
def test_an_installed_bench_loads_its_kernels_through_its_own_entry_point(tmp_path):
    import json

    from tests.conftest import build_wheel, copy_project

    site = tmp_path / "site"
    wheel = build_wheel(copy_project(tmp_path / "src"), tmp_path / "dist")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                        str(site), str(wheel)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert (site / "bench_kernels" / "__init__.py").is_file() and not (site / "kernels").exists()
    env = {**os.environ, "PYTHONPATH": str(site)}
    res = subprocess.run([sys.executable, "-P", "-c", LOADED], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    assert seen["entry_point"] == ["bench", "bench_kernels"] and Path(seen["from"]) == site, seen
    assert seen["package"] == str(site / "bench_kernels" / "__init__.py"), seen
    source, distribution = seen["kernels"]["torch_stack"]
    assert source == str(site / "bench_kernels" / "torch_stack.py") and distribution is None, seen


def test_a_misspelt_kernel_option_is_refused_naming_the_known_ones():
    """@kernel's optional keywords are KernelSpec's fields: `require=` (for `requires=`) is
    refused before anything registers, not silently dropped."""
    from harness import registry

    with pytest.raises(UserError, match=r"unknown option 'require' .*requires.*docs/kernels.md"):
        kernel("misspelt_option_probe", workloads=("attention",), dtypes=("float32",), require=("cupy",))
    assert "misspelt_option_probe" not in registry._REGISTRY


def test_kernel_options_reach_the_spec_and_defaults_fill_the_rest():
    from harness import registry

    def fn(q, k, v, out, *, causal, scale):
        """first line of the docstring"""

    kernel("options_probe", workloads=("attention",), dtypes=("float32",), requires=("cupy",),
           install="pip install cupy")(fn)
    try:
        spec = registry._REGISTRY["options_probe"]
        assert (spec.devices, spec.requires, spec.install, spec.description, spec.numerics, spec.memory) == \
            (("cpu", "cuda"), ("cupy",), "pip install cupy", "first line of the docstring", {}, None)
    finally:
        del registry._REGISTRY["options_probe"]
