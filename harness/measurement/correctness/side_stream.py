"""The side-stream check (CUDA only): work a kernel leaves on a stream that does not wait for
the caller's, found by ordering (a held stream, a copy right behind the call), not by a race
the kernel could win however fast it is.
"""

from __future__ import annotations

import time

from harness.measurement.correctness.checks import elements, is_cuda, output_names, outputs_of, spec_parts
from harness.measurement.correctness.poison import bits_diff, bits_equal, poison_, unwritten_mask
from harness.measurement.timing.timers import hold_stream, max_sm_hz

# side_stream_check holds the current stream with a spin of SIDE_STREAM_HOLD_S while the
# kernel is called, waits SIDE_STREAM_SETTLE_S on the host, and looks at `out` from a
# stream of its own: anything written while the hold lasts ran on a stream that does not
# wait for the caller's. A hold that ended before the look (a slow host) is doubled, up to
# SIDE_STREAM_MAX_HOLD_S; SIDE_STREAM_REPS such looks are made. Whether the hold still
# lasted at the look is checked (an event), never assumed, so the first hold only needs to
# outlast one enqueue and the settle in the common case: 20 ms (it was 50 ms; every kernel
# of every config pays it twice: the harness's own cost, issue 32).
SIDE_STREAM_HOLD_S = 0.02
SIDE_STREAM_MAX_HOLD_S = 0.8
SIDE_STREAM_SETTLE_S = 0.01
SIDE_STREAM_REPS = 2


def side_stream_check(spec, inputs, out, *, cfg, workload) -> str | None:
    """Why the kernel's work runs off the current stream, or None (always None on the CPU);
    the kernel called on ``inputs`` and ``out`` (the call's outputs, or its only one) as
    ``workload.call`` calls it at ``cfg``.

    Decided by ordering, not by a race the kernel could win however fast it is:

    * a spin holds the current stream while the kernel is called; every output is read from
      a stream of the check's own while the hold still lasts (checked by an event after the
      spin): every element must still hold the poison, since nothing the caller's stream
      orders may have run yet. Work on a stream that does not wait for the caller's writes
      during the hold, however short it is;
    * a copy of each output enqueued on the current stream right after the call (no host
      sync in between) must equal it after a device-wide synchronize: work forked to another
      stream and never joined back writes after the current stream is done with the call.
    """
    import torch

    outs = outputs_of(out)
    if not is_cuda(outs[0]):
        return None

    fn, _ = spec_parts(spec)
    names = output_names(workload, cfg)
    dev = outs[0].device
    stream = torch.cuda.current_stream(dev)
    watcher = torch.cuda.Stream(device=dev)  # a pool stream: it never waits for the caller's
    cycles_per_s = max_sm_hz(dev)
    hold, looks = SIDE_STREAM_HOLD_S, 0
    during = tuple(torch.empty_like(o) for o in outs)
    while looks < SIDE_STREAM_REPS:
        for o in outs:
            poison_(o)
        torch.cuda.synchronize(dev)
        hold_stream(hold, cycles_per_s)
        held = torch.cuda.Event()
        held.record(stream)
        t0 = time.perf_counter()
        workload.call(fn, inputs, outs, cfg)
        t_call = time.perf_counter() - t0
        visible = tuple(o.clone() for o in outs)  # on the current stream, right behind the call
        time.sleep(SIDE_STREAM_SETTLE_S)
        with torch.cuda.stream(watcher):
            for d, o in zip(during, outs):
                d.copy_(o)
        watcher.synchronize()
        still_held = not held.query()
        torch.cuda.synchronize(dev)
        if not still_held:
            if t_call >= hold or hold >= SIDE_STREAM_MAX_HOLD_S:
                # The call itself waited for the hold (it synchronizes), or the host never
                # outlasted it: the look cannot be made; the forked-work look below and the
                # gate's per-call stream check still stand.
                return _written_late(visible, outs, names)
            hold *= 2
            continue
        looks += 1
        for name, d, o in zip(names, during, outs):
            early = int((~unwritten_mask(d)).sum())
            if early:
                return (f"{early} of {o.numel()} {elements(name)} were written while the caller's stream was "
                        f"still held before the call ({hold * 1e3:.0f} ms spin): the work runs on a stream that "
                        f"does not wait for the caller's")
        late = _written_late(visible, outs, names)
        if late:
            return late
    return None


def _written_late(visible, outs, names) -> str | None:
    """Why an output changed after the caller's stream finished the call (its copy right behind
    the call differs from it now), or None."""
    for name, seen, o in zip(names, visible, outs):
        if not bits_equal(seen, o):
            late = int(bits_diff(seen, o).sum())
            return (f"{late} of {o.numel()} {elements(name)} were written after the caller's stream had "
                    f"finished the call: work forked to another stream and never joined back")
    return None
