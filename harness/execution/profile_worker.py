"""The process ``ncu`` profiles: one kernel (or the workload's bare op), one config, the call
wrapped in an NVTX range.

Run as ``python -m harness.execution.profile_worker SPEC.json`` (by
harness/measurement/profile.py, under ncu). Only the kernel call sits inside the range;
input generation, the warm-up calls (compilation, autotuning), the NaN poisoning of the
output and the float64 check of what the profiled call wrote all stay outside it, so
``--nvtx-include`` leaves them out of the counters. The result (the output check) is
written as JSON to the path the spec names; nothing is printed.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from harness.registry import get_kernel, get_workload
from harness.jsonsafe import jsonable
from harness.measurement.correctness.after_timing import check_timed_output
from harness.measurement.correctness.results import Tolerance
from harness.measurement.correctness.poison import poison_
from harness.measurement.counters import nvtx_range
from harness.measurement.numerics import NumericState, apply
from harness.provenance.code import require_private_bytecode

# Calls before the profiled ones: the first call of a shape compiles and may autotune
# (dozens of launches that are not the kernel's steady state).
WARMUP_CALLS = 2


def resolve(ref: str):
    """A registered kernel name, or ``module:function`` (a kernel outside the registry)."""
    if ":" in ref:
        module, attr = ref.split(":", 1)
        return getattr(importlib.import_module(module), attr)

    return get_kernel(ref).fn


def run(spec: dict) -> dict:
    """Profile the spec's kernel, or (``bare``) the workload's bare op, on the same inputs."""
    wl = get_workload(spec["config"]["workload"])
    cfg = wl.from_row(spec["config"])
    device = spec.get("device", "cuda")  # "cpu" only to test this worker without a GPU
    inputs = tuple(wl.make_inputs(cfg, spec["seed"], wl.timing_family, device))
    if spec.get("bare"):
        outs = wl.allocate_bare_outputs(cfg, device)
        _calls(spec, outs, lambda: wl.bare_op(cfg, inputs, outs), device)
        why = wl.bare_check(cfg, inputs, outs, atol=spec["atol"], rtol=spec["rtol"])
        return jsonable({"output_check": {"passed": why is None, "reason": None if why is None else f"profiled bare op: {why}"}})
    fn = resolve(spec["kernel"])
    outs = tuple(wl.allocate_outputs(cfg, device))
    _calls(spec, outs, lambda: wl.call(fn, inputs, outs, cfg), device)
    rep = check_timed_output(cfg, inputs, outs, workload=wl, tol=Tolerance(spec["atol"], spec["rtol"]), label="profiled call")
    return jsonable({"output_check": rep.as_dict()})


def _calls(spec: dict, outs, call, device: str) -> None:
    """The warm-up calls, then the profiled ones, each inside the NVTX range with ``outs``
    poisoned before it (a call that skips its work leaves the poison: unwritten, caught after)."""
    import torch

    cuda = device == "cuda"
    with apply(NumericState.from_registration(spec.get("numerics") or {})):
        for _ in range(WARMUP_CALLS):
            call()
        for _ in range(spec["calls"]):
            for out in outs:
                poison_(out)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push(nvtx_range(spec["name"]))
            call()
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()


def main(argv: list[str]) -> int:
    require_private_bytecode()  # inherited from the driver: no planted .pyc ran as this process's code
    spec = json.loads(Path(argv[0]).read_text())
    result = run(spec)
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
