"""bench: a pre-registered benchmark harness for GPU kernels.

Rooms (docs/architecture.md, with the layers they import along): ``provenance`` (git guard,
code record), ``vocab`` (row kinds, metrics, devices), ``workloads`` (shapes, FLOP/byte
formulas, inputs), ``measurement`` (timing, clocks, memory model, correctness, ceilings),
``registration`` (schema, bar and [verify] languages), ``ledger`` (store, rows, verify),
``pipeline`` and ``execution`` (one config, where configs run), ``governance`` (line, verdict,
decisions), ``reporting`` (views and renderers), ``commands`` (the writers), ``cli`` (thin).

The library surface is ``__all__`` (docs/architecture.md, "The library surface"): the plugin
API (``from harness import kernel, KernelSpec``; docs/kernels.md), and what a script needs to
load a registration, read a ledger's rows, run one config and measure a callable. research/
and the docs' examples import nothing else of harness (tests/test_public_api.py). The names
load on first use (``__getattr__``), so ``import harness`` stays cheap and torch-free.
"""

__version__ = "0.1.0"

# The library surface: public name -> (the module that defines it, its name there). Grouped by
# what a script does with them; research/ and the docs' examples import only these.
PUBLIC_API = {
    # kernels: the plugin API (docs/kernels.md)
    "kernel": ("harness.registry", "kernel"),
    "KernelSpec": ("harness.registry", "KernelSpec"),
    "get_kernel": ("harness.registry", "get_kernel"),
    "load_kernels": ("harness.registry", "load_kernels"),
    "UserError": ("harness.errors", "UserError"),
    # workloads: the plugin API (docs/workloads.md)
    "Workload": ("harness.workloads.api", "Workload"),
    "Axis": ("harness.workloads.api", "Axis"),
    "Tensor": ("harness.workloads.api", "Tensor"),
    "GridPoint": ("harness.workloads.api", "GridPoint"),
    "positive": ("harness.workloads.api", "positive"),
    "get_workload": ("harness.registry", "get_workload"),
    "load_workloads": ("harness.registry", "load_workloads"),
    # load a registration
    "Registration": ("harness.registration.schema", "Registration"),
    "load_registration": ("harness.registration.schema", "load"),
    "registration_from_table": ("harness.registration.schema", "from_table"),
    # read a ledger's rows, and the views bench status / bench report take of them
    "ledger_path": ("harness.ledger.format", "ledger_path"),
    "read_rows": ("harness.ledger.format", "read_rows"),
    "latest_outcomes": ("harness.vocab.outcomes", "latest_outcomes"),
    "OUTCOME_KINDS": ("harness.vocab.outcomes", "OUTCOME_KINDS"),
    "CEILINGS_LEDGER": ("harness.ledger.format", "CEILINGS_LEDGER"),
    "stored_ceilings": ("harness.commands.ceilings", "stored_ceilings"),
    "line_paths": ("harness.reporting.analysis.lines", "line_paths"),
    "load_line": ("harness.reporting.analysis.lines", "load_path"),
    "line_statuses": ("harness.reporting.analysis.status", "statuses"),
    "report_data": ("harness.reporting.analysis.report", "report_data"),
    "dataframe": ("harness.ledger.store", "dataframe"),
    "tidy": ("harness.reporting.analysis.tidy", "tidy"),
    "counter_table": ("harness.measurement.counters", "counter_table"),
    # the next run's speedup (docs/measurement.md): runs of a line, τ, coverage of one run by another
    "ledger_runs": ("harness.governance.nextrun", "runs"),
    "between_run": ("harness.governance.nextrun", "between_run"),
    "run_coverage": ("harness.governance.nextrun", "coverage"),
    "NEXT_RUN_LEVEL": ("harness.measurement.nextrun", "NEXT_RUN_LEVEL"),
    "NEXT_RUN_TAU_FLOOR": ("harness.measurement.nextrun", "NEXT_RUN_TAU_FLOOR"),
    "render_error": ("harness.reporting.render.messages", "render_error"),
    # run one config: its inputs, the correctness gate, the whole pipeline (no ledger)
    "Config": ("harness.workloads", "Config"),
    "flops": ("harness.workloads.formulas", "flops"),
    "make_inputs": ("harness.workloads.inputs", "make_inputs"),
    "detect_device": ("harness.measurement.device", "detect_device"),
    "DEFAULT_TOLERANCES": ("harness.measurement.correctness.figures", "DEFAULT_TOLERANCES"),
    "gate": ("harness.measurement.correctness.gate", "gate"),
    "gate_kernels": ("harness.measurement.correctness.gate", "gate_kernels"),
    "GatePolicy": ("harness.measurement.correctness.gate", "GatePolicy"),
    "BoundaryMemo": ("harness.measurement.correctness.gate", "BoundaryMemo"),
    "poison_": ("harness.measurement.correctness.poison", "poison_"),
    "SweepContext": ("harness.pipeline.context", "SweepContext"),
    "run_config": ("harness.pipeline.run", "run_config"),
    # measure a callable: the timing protocol, its timers and buffers, the device's ceilings
    "measure": ("harness.measurement.timing", "measure"),
    "TimingPolicy": ("harness.measurement.timing", "TimingPolicy"),
    "HostTimer": ("harness.measurement.timing", "HostTimer"),
    "CudaEventTimer": ("harness.measurement.timing", "CudaEventTimer"),
    "ARM_BASELINE": ("harness.measurement.timing", "ARM_BASELINE"),
    "ARM_CONTROL": ("harness.measurement.timing", "ARM_CONTROL"),
    "round_orders": ("harness.measurement.timing", "round_orders"),
    "l2_flush": ("harness.measurement.timing", "l2_flush"),
    "device_l2_bytes": ("harness.measurement.timing", "device_l2_bytes"),
    "rotation_slots": ("harness.measurement.timing", "rotation_slots"),
    "sustain": ("harness.measurement.timing", "sustain"),
    "SustainBudget": ("harness.measurement.timing", "SustainBudget"),
    "SUSTAINED_WARM_S": ("harness.measurement.timing", "WARM_S"),
    "SUSTAINED_TIMED_S": ("harness.measurement.timing", "TIMED_S"),
    "open_monitor": ("harness.measurement.clocks", "open_monitor"),
    "drain_s": ("harness.measurement.leftover", "drain_s"),
    "seal_clocks": ("harness.measurement.clockguard", "seal"),
    "check_clocks": ("harness.measurement.clockguard", "check"),
    "measure_ceilings": ("harness.measurement.ceilings", "measure_ceilings"),
    "device_fingerprint": ("harness.measurement.ceilings", "device_fingerprint"),
}
__all__ = sorted(PUBLIC_API)


def __getattr__(name):
    if name in PUBLIC_API:
        import importlib

        module, attr = PUBLIC_API[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *PUBLIC_API})


# -- the code packages -----------------------------------------------------------------------
# Import name -> the repository folder that holds it. The shipped kernels (the ``kernels/``
# folder) import as ``bench_kernels``: an installed bench puts ``bench_kernels/`` in
# site-packages (setup.py maps the folder), never a top-level ``kernels`` — Hugging Face's
# kernel loader owns that name. In a checkout, ``bench_kernels`` is the ``kernels/`` folder
# beside this package (SourceOnlyFinder below), so harness and kernels always come from one tree.
# The folder has no ``__init__.py``: from a checkout, ``import kernels`` is at most a namespace
# package, which any installed ``kernels`` (Hugging Face's) outranks wherever it is on sys.path.
KERNELS_PACKAGE = "bench_kernels"
CODE_PACKAGES = {"harness": "harness", KERNELS_PACKAGE: "kernels"}


# -- only source runs ------------------------------------------------------------------------
# A `.pyc` in the repository's __pycache__ is not covered by the commit stamp, and Python runs
# one whose header matches (or any UNCHECKED_HASH one) without reading the source. So every
# later module of the code packages, in every bench process (spawned workers and Ray actors
# import this package first), is compiled from its source: no bytecode is read or written.
# This module itself is loaded before this runs, so its bytecode can come only from bench's
# private cache, set at start-up by bench's .pth before anything is imported (harness/pycache.py:
# no __pycache__ of a source tree is read at all), and is checked against its source
# (harness.provenance.code). The finder stays for defence in depth. It lives here, not in a
# submodule, so nothing else is loaded the ordinary way first.
import sys as _sys
from importlib.machinery import PathFinder as _PathFinder
from importlib.machinery import SourceFileLoader as _SourceFileLoader
from importlib.machinery import SourcelessFileLoader as _SourcelessFileLoader

class SourceOnlyLoader(_SourceFileLoader):
    """A source loader that compiles the source every time: it never reads nor writes bytecode."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def _kernels_spec(name):
    """``bench_kernels`` beside this package, never elsewhere: ``bench_kernels/`` where bench is
    installed (site-packages, which may also hold Hugging Face's ``kernels/``), else the
    ``kernels/`` folder of this source tree, a package of modules with no ``__init__.py`` (a
    ``kernels/`` that has one is some other package: Hugging Face's in a site-packages); None
    if neither."""
    from importlib.machinery import ModuleSpec
    from importlib.util import spec_from_file_location
    from pathlib import Path

    top = Path(__file__).resolve().parent.parent
    init = top / KERNELS_PACKAGE / "__init__.py"
    if init.is_file():
        return spec_from_file_location(name, init, loader=SourceOnlyLoader(name, str(init)),
                                       submodule_search_locations=[str(init.parent)])
    folder = top / CODE_PACKAGES[KERNELS_PACKAGE]
    if folder.is_dir() and not (folder / "__init__.py").exists():
        spec = ModuleSpec(name, None, is_package=True)  # its modules load through this finder
        spec.submodule_search_locations = [str(folder)]
        return spec
    return None


class SourceOnlyFinder:
    """Finds the code packages' modules as Python would, and loads them from their source only."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] not in CODE_PACKAGES:
            return None
        if name == KERNELS_PACKAGE:
            return _kernels_spec(name)
        spec = _PathFinder.find_spec(name, path, target)
        if spec is None:
            return None
        if isinstance(spec.loader, _SourcelessFileLoader):
            raise ImportError(f"{spec.origin}: bytecode without its source — bench runs only source; delete it")
        if type(spec.loader) is _SourceFileLoader:
            spec.loader = SourceOnlyLoader(spec.loader.name, spec.loader.path)
        return spec


if not any(getattr(f, "__name__", None) == "SourceOnlyFinder" for f in _sys.meta_path):
    _sys.meta_path.insert(0, SourceOnlyFinder)

# -- the clocks, before any kernel ------------------------------------------------------------
# The harness's own references to the clocks it times with, taken now: this package is the
# first import of every bench process, kernels come later (registry.load_kernels), and a
# kernel that rebinds time.perf_counter_ns or torch.cuda.Event.elapsed_time must not be
# what a timer reads (measurement/clockguard.py, issue 47).
from harness.measurement import clockguard as _clockguard  # noqa: E402, F401

