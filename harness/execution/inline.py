"""The inline executor: one slot, configs run in the driver process (``bench sweep --inline``).

For debugging (a breakpoint, a profiler, a traceback where it happened). It cannot survive
a kernel that kills or hangs its process, so there is no watchdog; an exception out of a
config is the config's `crashed` rows.
"""

from __future__ import annotations

from harness.execution.executor import Done, Executor, Job, SlotInfo
from harness.execution.jobs import run_job
from harness.measurement.ceilings import device_fingerprint
from harness.measurement.device import env_summary


class InlineExecutor(Executor):
    can_kill = False

    def __init__(self, device: str):
        self.device = device
        self._job: tuple[int, Job] | None = None

    def start(self) -> list[SlotInfo]:
        return [SlotInfo(env_summary(self.device), device_fingerprint(self.device))]

    def submit(self, slot: int, job: Job) -> None:
        self._job = (slot, job)

    def poll(self, timeout: float) -> list:
        if self._job is None:
            return []
        slot, job = self._job
        self._job = None
        return [Done(slot, job.id, run_job(job, self.device))]

    def replace(self, slot: int, cause: str | None = None):
        raise RuntimeError("the inline executor cannot replace its process")

    def close(self) -> None:
        self._job = None


