"""Kernels that fail in each way an overnight sweep must survive (tests only).

Registered as a ``bench.kernels`` entry-point plugin by the tests (never shipped in
``kernels/``). ``honest_stack`` is the torch stack under another name, so a line can put a
fault between two honest candidates. Each fault happens on the kernel's first call, i.e.
in the correctness gate, as it would for a broken kernel under test, except
``fault_timing_segv``'s, which waits for the timing phase (where every arm runs at once).
"""

from __future__ import annotations

from harness import kernel

_DTYPES = ("float32", "float16", "bfloat16")
_ANY = dict(workloads=("attention",), dtypes=_DTYPES, devices=("cpu", "cuda"))
_GPU = dict(workloads=("attention",), dtypes=_DTYPES, devices=("cuda",), requires=("cupy",))
# A host allocation no machine can satisfy (torch raises its out-of-memory error at once).
HUGE_BYTES = 1 << 52


@kernel("honest_stack", **_ANY)
def honest_stack(q, k, v, out, *, causal, scale):
    """The torch stack: an honest neighbour of the faulty kernel."""
    from bench_kernels.torch_stack import torch_stack

    torch_stack(q, k, v, out, causal=causal, scale=scale)


@kernel("fault_raise", **_ANY)
def fault_raise(q, k, v, out, *, causal, scale):
    """A Python exception."""
    raise RuntimeError("fault_raise: deliberate failure")


@kernel("fault_oom", **_ANY)
def fault_oom(q, k, v, out, *, causal, scale):
    """Out of memory: an allocation far beyond the device's."""
    import torch

    torch.empty(HUGE_BYTES, dtype=torch.uint8, device=q.device)


@kernel("fault_segv", **_ANY)
def fault_segv(q, k, v, out, *, causal, scale):
    """A segfault: reading address 0."""
    import ctypes

    ctypes.string_at(0)


@kernel("fault_timing_segv", **_ANY)
def fault_timing_segv(q, k, v, out, *, causal, scale):
    """Honest through the correctness gate, a segfault once timed (the phase names every arm)."""
    from harness.pipeline import phase

    if phase.current()[1] == phase.TIMING:
        import ctypes

        ctypes.string_at(0)
    honest_stack(q, k, v, out, causal=causal, scale=scale)


@kernel("fault_sigkill", **_ANY)
def fault_sigkill(q, k, v, out, *, causal, scale):
    """SIGKILL of its own process, as the OOM killer sends it."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def _dies_before_start(cfg):
    """Kills the worker that asks, before the config's first phase: once when
    ``BENCH_FAULT_START`` names a file that does not exist yet (it is created), every time
    when it is ``always``. Only in a worker (a local worker process, a Ray actor): the
    `bench` commands the test starts itself (their parent is ``BENCH_FAULT_SPARE_PPID``)
    ask too, and live."""
    import os
    import signal

    how = os.environ.get("BENCH_FAULT_START")
    if not how or str(os.getppid()) == os.environ.get("BENCH_FAULT_SPARE_PPID"):
        return None
    if how != "always":
        try:
            open(how, "x").close()
        except FileExistsError:
            return None
    os.kill(os.getpid(), signal.SIGKILL)


@kernel("fault_before_start", supports=_dies_before_start, **_ANY)
def fault_before_start(q, k, v, out, *, causal, scale):
    """Honest, but its worker dies while the config is being set up (``_dies_before_start``),
    before any phase is reported: as a worker that died idle looks to the driver."""
    honest_stack(q, k, v, out, causal=causal, scale=scale)


@kernel("fault_hang", **_ANY)
def fault_hang(q, k, v, out, *, causal, scale):
    """A host hang: a launcher that deadlocks on its own lock. With ``BENCH_FAULT_PID_FILE``
    set it first writes its pid there, so a test can kill the worker mid-config."""
    import os
    import threading

    mark = os.environ.get("BENCH_FAULT_PID_FILE")
    if mark:
        with open(mark, "w") as f:
            f.write(str(os.getpid()))

    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


_OOB = r'''
extern "C" __global__ void oob(float* p) {
    // Far past any allocation: an illegal address, which poisons the CUDA context.
    p[(long long)threadIdx.x * (1LL << 40)] = 1.0f;
}
'''

_SPIN = r'''
extern "C" __global__ void spin(int* flag) {
    // Never returns: the flag is never cleared, and the volatile read cannot be hoisted.
    while (*(volatile int*)flag) { __nanosleep(1000); }
}
'''


def _launch(src: str, name: str, arg):
    import cupy
    import torch

    fn = cupy.RawKernel(src, name)
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        fn((1,), (32,), (arg,))


@kernel("fault_oob_write", **_GPU)
def fault_oob_write(q, k, v, out, *, causal, scale):
    """An out-of-bounds write through a cupy RawKernel (illegal memory access)."""
    import cupy

    _launch(_OOB, "oob", cupy.asarray(out))


@kernel("fault_spin", **_GPU)
def fault_spin(q, k, v, out, *, causal, scale):
    """A GPU kernel that spins forever."""
    import cupy

    flag = cupy.ones(1, dtype=cupy.int32)
    _launch(_SPIN, "spin", flag)
