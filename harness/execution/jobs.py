"""What a worker process does with a job, local or a Ray actor: the one job runner both pools import.

``run_job`` computes a job (a config's outcome rows, or the device's ceilings) in whichever
process runs it, the inline executor's included; ``run_isolated`` wraps it for a worker
process (phase reports to the driver, the device checked at every phase, a fatal error
told apart from a user error). ``isolate``, ``slot_info`` and ``tail`` set a worker up,
say what it runs on, and read back its last output for a fault row.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from harness.errors import UserError
from harness.execution.executor import Job
from harness.pipeline.rows import crashed_outcomes
from harness.pipeline.run import run_config
from harness.measurement.ceilings import device_fingerprint, measure_ceilings
from harness.pipeline.gate import gate_job
from harness.pipeline import phase
from harness.measurement.device import env_summary

# The worker's last output attached to a fault row.
LAST_OUTPUT_LINES = 20
LAST_OUTPUT_CHARS = 4000


def run_job(job: Job, device: str, *, contain: bool = True):
    """What a job computes, in whichever process runs it: config outcomes, a ceilings row, or
    one kernel's gate (pipeline/gate.gate_job).

    ``contain``: an exception out of a config becomes its `crashed` rows (in-process); a
    worker passes False, because a process that raised there may not measure again.
    """
    if job.kind == "ceilings":
        return measure_ceilings(device).to_row()
    if job.kind == "gate":
        return gate_job(job.task.config, job.task.candidates[0], job.ctx)
    try:
        return run_config(job.task.config, job.task.candidates, job.ctx)
    except UserError:
        raise
    except Exception as exc:
        if not contain:
            raise
        # a kernel that crashes the config is an outcome, not the end of the night
        return crashed_outcomes(job.task.config, job.task.candidates, job.ctx, exc)


def run_isolated(job: Job, device: str, send) -> tuple[str, object]:
    """Run one job in a worker (a local process, a Ray actor): ``("done", result)``,
    ``("error", message)`` (a UserError: the sweep stops) or ``("fatal", cause)`` (this
    process may not measure again: the caller ends it).

    Each phase the config enters is sent first as ``("phase", job.id, kernels, phase)``; on a
    GPU the device is checked at every phase, so a poisoned context is blamed on the kernel
    of the phase that just ended.
    """
    import traceback

    def sink(kernels, ph):
        err = _device_error(device)
        if err:
            raise phase.Fatal(err)
        send(("phase", job.id, kernels, ph))

    phase.install(sink)
    try:
        result = run_job(job, device, contain=False)
        err = _device_error(device)
        return ("fatal", err) if err else ("done", result)
    except phase.Fatal as exc:
        return "fatal", str(exc)
    except UserError as exc:
        return "error", str(exc)
    except BaseException as exc:
        traceback.print_exc()
        return "fatal", f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        phase.install(None)


def _device_error(device: str) -> str | None:
    """A sticky device error (the CUDA context is poisoned), as its first line of text, or None."""
    if device != "cuda":
        return None
    import torch

    try:
        torch.cuda.synchronize()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def isolate(fd: int) -> None:
    """Set up a worker process (local or a Ray actor): Ctrl-C reaches the whole terminal
    process group, but the driver alone decides what it means; stdout and stderr go to the
    log ``fd`` (whose tail a fault row carries), where a segfault leaves its Python traceback."""
    import faulthandler

    with contextlib.suppress(ValueError):  # not the main thread: no signal handlers to set
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.reconfigure(line_buffering=True)
    faulthandler.enable()


def slot_info(device: str, no_gpu: str) -> tuple[dict, dict]:
    """What a worker (a local process, a Ray actor) reports when it starts: the env stamp and
    the fingerprint of the device it opened; UserError ``no_gpu`` where torch sees no GPU."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError(no_gpu)
    return dict(env_summary(device)), device_fingerprint(device)


# faulthandler's dump of a fatal signal: the frames from the innermost (the kernel's) outwards,
# then the extension modules loaded (noise for a fault row).
FAULT_DUMP = "Fatal Python error"
EXTENSION_MODULES = "Extension modules:"


def tail(log: Path) -> str:
    """The last lines a worker wrote (stdout, stderr), or where faulthandler dumped a fatal
    signal, that dump from its first line: its innermost frames name the kernel that faulted,
    however deep the harness's own frames below them go."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    lines = text.splitlines()
    dump = max((i for i, line in enumerate(lines) if line.startswith(FAULT_DUMP)), default=None)
    if dump is not None:
        kept = [line for line in lines[dump:] if not line.startswith(EXTENSION_MODULES)]
        return "\n".join(kept[:LAST_OUTPUT_LINES])[:LAST_OUTPUT_CHARS]
    return "\n".join(lines[-LAST_OUTPUT_LINES:])[-LAST_OUTPUT_CHARS:]
