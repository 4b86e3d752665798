"""Hollow kernels: plausible-looking attention that the correctness gate must reject.

Each is a plain torch function with the kernel contract ``fn(q, k, v, out, *, causal,
scale)`` and exactly one flaw, taken from the user accounts (the fused-attention campaign:
no softmax; the llama-bench decode artifact: a fraction of the KV read; the Sakana
incident: the reference's freed memory returned as the result) or from the usual ways a
fused kernel goes wrong. ``ZOO`` lists them with the tag the gate must
reject them with; stateful ones are built fresh per test by ``Hollow.make()``.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable

_REAL_PERF_COUNTER_NS = time.perf_counter_ns  # the clock attacks' own clock (issue 47)

# first_tiles_only reads this many keys: one 64-wide tile, the llama-bench artifact's "one 128-row
# iteration per block" in miniature (7.9% of the cache there, half of it here).
FIRST_KEYS = 64
# tail_unwritten launches Nq // BLOCK_M row blocks (floor, not ceil).
BLOCK_M = 64
# side_stream sleeps this many GPU cycles before writing (~20 ms at 2 GHz), so the race with
# the caller's stream is lost every time rather than by luck.
SIDE_SLEEP_CYCLES = 40_000_000


# ----------------------------------------------------------------------------- helpers


def scores(q, k, *, causal, scale, dtype=None, n_keys=None):
    """q·kᵀ·scale in ``dtype`` (float32 by default), GQA expanded, bottom-right causal -inf."""
    import torch

    dtype = dtype or torch.float32
    h, nq, nk = q.shape[1], q.shape[2], k.shape[2]
    kk = k.repeat_interleave(h // k.shape[1], dim=1)
    if n_keys is not None:
        kk = kk[:, :, :n_keys]
    s = torch.matmul(q.to(dtype), kk.to(dtype).transpose(-1, -2)) * scale
    if causal:
        j = torch.arange(s.shape[-1], device=q.device)
        i = torch.arange(nq, device=q.device) + (nk - nq)
        s = s.masked_fill(j[None, :] > i[:, None], float("-inf"))
    return s


def attention(q, k, v, *, causal, scale, dtype=None, n_keys=None, kv_map=None):
    """Correct attention in ``dtype`` (float32 default): the base every hollow kernel bends."""
    import torch

    dtype = dtype or torch.float32
    if kv_map is not None:  # explicit query-head -> kv-head mapping
        k, v = k[:, kv_map], v[:, kv_map]
    s = scores(q, k, causal=causal, scale=scale, dtype=dtype, n_keys=n_keys)
    vv = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    if n_keys is not None:
        vv = vv[:, :, :n_keys]
    return torch.matmul(torch.softmax(s, dim=-1), vv.to(dtype))


# ----------------------------------------------------------------------------- stateless


def softmax_omitted(q, k, v, out, *, causal, scale):
    """The fused-attention campaign: no softmax; every visible key weighted equally (the mean of V)."""
    import torch

    s = scores(q, k, causal=causal, scale=scale)
    w = torch.isfinite(s).float()
    w = w / w.sum(-1, keepdim=True)
    vv = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1).float()
    out.copy_(torch.matmul(w, vv))


def no_max_subtraction(q, k, v, out, *, causal, scale):
    """The fused-attention campaign's eager path: raw exp of the logits, no max-subtraction (overflows to inf/NaN)."""
    import torch

    e = torch.exp(scores(q, k, causal=causal, scale=scale))
    vv = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1).float()
    out.copy_(torch.matmul(e / e.sum(-1, keepdim=True), vv))


def first_tiles_only(q, k, v, out, *, causal, scale):
    """The llama-bench decode artifact: attends only to the first FIRST_KEYS keys of the cache."""
    out.copy_(attention(q, k, v, causal=causal, scale=scale, n_keys=FIRST_KEYS))


def half_kv_sdpa(q, k, v, out, *, causal, scale):
    """The llama-bench decode artifact at full scale: a fast fused kernel (torch SDPA) over only the first half of
    the keys. The views are never copied, so the half that is skipped is never read: the
    counter reductio (harness/measurement/counters.py) must call its DRAM reads impossible."""
    import torch

    half = max(1, k.shape[2] // 2)
    o = torch.nn.functional.scaled_dot_product_attention(q, k[:, :, :half], v[:, :, :half], is_causal=causal,
                                                         scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    out.copy_(o)


def tail_unwritten(q, k, v, out, *, causal, scale):
    """Grid of Nq // BLOCK_M row blocks: the partial last block is never written."""
    rows = (q.shape[2] // BLOCK_M) * BLOCK_M
    if rows:
        out[:, :, :rows] = attention(q, k, v, causal=causal, scale=scale)[:, :, :rows]


def inputs_mutated(q, k, v, out, *, causal, scale):
    """Folds the scale into q in place (q *= scale): right answer, corrupted input."""
    q.mul_(scale)
    out.copy_(attention(q, k, v, causal=causal, scale=1.0))


def lower_precision(q, k, v, out, *, causal, scale):
    """Declares float32 but computes in bfloat16 throughout."""
    import torch

    out.copy_(attention(q, k, v, causal=causal, scale=scale, dtype=torch.bfloat16))


def wrong_gqa_mapping(q, k, v, out, *, causal, scale):
    """Query head h reads kv head h % Hkv instead of h // (H // Hkv)."""
    import torch

    h, hkv = q.shape[1], k.shape[1]
    kv_map = torch.arange(h, device=q.device) % hkv
    out.copy_(attention(q, k, v, causal=causal, scale=scale, kv_map=kv_map))


def k_as_v(q, k, v, out, *, causal, scale):
    """Reuses the K operand where V belongs."""
    out.copy_(attention(q, k, k, causal=causal, scale=scale))


def raises(q, k, v, out, *, causal, scale):
    """Fails the way a bad launch does."""
    raise RuntimeError("CUDA error: an illegal memory access was encountered (emulated by the zoo)")


def zero_output(q, k, v, out, *, causal, scale):
    """Writes zeros: passes only a tolerance looser than the outputs themselves."""
    out.zero_()


# ----------------------------------------------------------------------------- stateful


def make_accumulator_reused():
    """The fused-attention campaign's RMSNorm slot never zeroed: adds the previous call's output to this one's."""
    state = {}

    def accumulator_reused(q, k, v, out, *, causal, scale):
        res = attention(q, k, v, causal=causal, scale=scale)
        prev = state.get(tuple(out.shape))
        if prev is not None:
            res = res + prev
        state[tuple(out.shape)] = res
        out.copy_(res)

    return accumulator_reused


def make_cached_by_shape():
    """Computes once per input shape, then returns that result for any inputs of the shape."""
    cache = {}

    def cached_by_shape(q, k, v, out, *, causal, scale):
        key = (tuple(q.shape), tuple(k.shape), causal)
        if key not in cache:
            cache[key] = attention(q, k, v, causal=causal, scale=scale).to(out.dtype)
        out.copy_(cache[key])

    return cached_by_shape


def make_cached_by_pointer():
    """Computes once per (q, k, v, out) address, then returns that result for those buffers."""
    cache = {}

    def cached_by_pointer(q, k, v, out, *, causal, scale):
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), tuple(q.shape))
        if key not in cache:
            cache[key] = attention(q, k, v, causal=causal, scale=scale).to(out.dtype)
        out.copy_(cache[key])

    return cached_by_pointer


def make_cached_by_version():
    """Computes once per (q, k, v, out) address and tensor version, then copies that result:
    right on every call (inputs rewritten in place bump their version), but a call on inputs
    it has seen does no attention at all. Only the physical floor can tell (measurement/floor.py)."""
    cache = {}

    def cached_by_version(q, k, v, out, *, causal, scale):
        key = tuple((t.data_ptr(), t._version) for t in (q, k, v)) + (out.data_ptr(), tuple(q.shape), causal)
        if key not in cache:
            cache.clear()
            cache[key] = attention(q, k, v, causal=causal, scale=scale).to(out.dtype)
        out.copy_(cache[key])

    return cached_by_version
# remembers_inputs fingerprints this many elements of each of q, k and v (plus the shapes):
# cheap against the attention it skips, and no two inputs the harness draws share them.
FINGERPRINT_ELEMENTS = 256


def fingerprint(*tensors) -> tuple:
    """A content key: shapes and FINGERPRINT_ELEMENTS evenly spaced elements of each tensor
    (not its address, not its shape alone): new content in the same buffers is a new key."""
    import hashlib

    h = hashlib.sha256()
    for t in tensors:
        flat = t.reshape(-1)
        step = max(1, flat.numel() // FINGERPRINT_ELEMENTS)
        h.update(str(tuple(t.shape)).encode())
        h.update(flat[::step][:FINGERPRINT_ELEMENTS].float().cpu().numpy().tobytes())
    return (h.hexdigest(),)


def make_remembers_inputs():
    """Issue 25, item 1: keeps its outputs keyed by the content of its inputs. Honest on
    content it has not seen (each gate case, each refreshed timed call), and on content it
    has seen copies the stored answer instead of computing: right every time, fast only
    where the timing repeats its inputs."""
    cache = {}

    def remembers_inputs(q, k, v, out, *, causal, scale):
        key = fingerprint(q, k, v) + (causal, float(scale))
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = attention(q, k, v, causal=causal, scale=scale).to(out.dtype).clone()
        out.copy_(hit)

    remembers_inputs.cache = cache
    return remembers_inputs


def make_stash_from_freed():
    """The Sakana incident, as close as torch allows: computes nothing, and returns whatever
    float64 result of out's shape it can find in the process (the reference's), keeping the
    last one it saw in a stash for later calls of that shape."""
    import torch

    stash = {}

    def stash_from_freed(q, k, v, out, *, causal, scale):
        key = (tuple(out.shape), str(out.device))
        for obj in gc.get_objects():
            # type(), not isinstance(): some module proxies warn when asked for __class__.
            if (issubclass(type(obj), torch.Tensor) and obj.dtype == torch.float64
                    and tuple(obj.shape) == key[0] and obj.device == out.device):
                stash[key] = obj.detach().clone()
        if key in stash:
            out.copy_(stash[key])

    return stash_from_freed


def side_stream(q, k, v, out, *, causal, scale):
    """Launches its work on a private stream the caller's stream never waits for (GPU only)."""
    import torch

    s = torch.cuda.Stream(device=out.device)
    s.wait_stream(torch.cuda.current_stream(out.device))
    with torch.cuda.stream(s):
        torch.cuda._sleep(SIDE_SLEEP_CYCLES)
        out.copy_(attention(q, k, v, causal=causal, scale=scale))
    for t in (q, k, v, out):
        t.record_stream(s)


def side_stream_fast(q, k, v, out, *, causal, scale):
    """Issue 16's cheat: all the work on a private stream that never waits for the caller's,
    with no delay, so it usually finishes before the caller's stream reads ``out``."""
    import torch

    s = torch.cuda.Stream(device=out.device)
    with torch.cuda.stream(s):
        out.copy_(attention(q, k, v, causal=causal, scale=scale))
    for t in (q, k, v, out):
        t.record_stream(s)


def side_stream_forked(q, k, v, out, *, causal, scale):
    """Forks to a private stream after the caller's work (wait_stream) but never joins back."""
    import torch

    s = torch.cuda.Stream(device=out.device)
    s.wait_stream(torch.cuda.current_stream(out.device))
    with torch.cuda.stream(s):
        out.copy_(attention(q, k, v, causal=causal, scale=scale))
    for t in (q, k, v, out):
        t.record_stream(s)


def make_alternating_wrong(honest_calls: int):
    """Right for its first ``honest_calls`` calls (the gate's), then wrong (10% high) on every
    other call: right only on some calls, so which timed call is checked decides."""
    state = {"n": 0}

    def alternating_wrong(q, k, v, out, *, causal, scale):
        state["n"] += 1
        res = attention(q, k, v, causal=causal, scale=scale)
        if state["n"] > honest_calls and state["n"] % 2:
            res = res * 1.1
        out.copy_(res)

    alternating_wrong.state = state
    return alternating_wrong


def make_timed_unwritten(honest_calls: int):
    """Right for its first ``honest_calls`` calls (the gate's), then returns without writing
    ``out``: only the timed calls leave it unwritten."""
    state = {"n": 0}

    def timed_unwritten(q, k, v, out, *, causal, scale):
        state["n"] += 1
        if state["n"] <= honest_calls:
            out.copy_(attention(q, k, v, causal=causal, scale=scale))

    timed_unwritten.state = state
    return timed_unwritten


# ----------------------------------------------------------------------------- time lies (issue 25)
# Kernels whose output is right but whose time is not: they leave work running after the call
# returns, or change the global state the next arm runs under.

# leaves_host_thread's thread computes for this long after the call returned: longer than the
# leftover watch (HOST_WATCH_S), bounded so a test never leaves a spinning thread behind.
HOST_LEFTOVER_S = 0.1
# leaves_device_work leaves this many 4096^3 fp16 matmuls on a side stream (~1.5 ms on an H200,
# research/drain_probe.py; the incident's kernel left ~2.7 ms). Eight 2048^3 ones (~0.14 ms)
# ended within ~0.1 ms of the call on the H200: under DRAIN_LIMIT_S for the gate's look, left
# to the timed calls' median-drain rule.
DEVICE_LEFTOVER_MATMULS = 8
DEVICE_LEFTOVER_SIZE = 4096


def _other_thread_count() -> int:
    """One thread where torch has several (the attack), two where it already has one (tests)."""
    import torch

    return 1 if torch.get_num_threads() != 1 else 2


def threads_changed(q, k, v, out, *, causal, scale):
    """Computes with every thread, then leaves torch one thread for whoever runs next."""
    import torch

    out.copy_(attention(q, k, v, causal=causal, scale=scale))
    torch.set_num_threads(_other_thread_count())


def flags_flipped(q, k, v, out, *, causal, scale):
    """Computes, then flips torch's TF32 matmul flag and the flash SDPA switch for whoever
    runs next (the TF32 incident: the next arm runs other kernels)."""
    import torch

    out.copy_(attention(q, k, v, causal=causal, scale=scale))
    torch.backends.cuda.matmul.allow_tf32 = not torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.enable_flash_sdp(not torch.backends.cuda.flash_sdp_enabled())


def affinity_changed(q, k, v, out, *, causal, scale):
    """Computes, then pins the process to one core for whoever runs next."""
    import os

    out.copy_(attention(q, k, v, causal=causal, scale=scale))
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def leaves_host_thread(q, k, v, out, *, causal, scale):
    """Writes the right output, then leaves a thread computing on the host after it returns."""
    import threading
    import time

    import torch

    out.copy_(attention(q, k, v, causal=causal, scale=scale))
    x = torch.randn(128, 128)

    def spin():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < HOST_LEFTOVER_S:
            x @ x

    threading.Thread(target=spin, name="leftover", daemon=True).start()


def leaves_device_work(q, k, v, out, *, causal, scale):
    """Writes the right output on the caller's stream, then leaves matmuls running on another
    stream after it returns (GPU only): the next arm would run beside them."""
    import torch

    out.copy_(attention(q, k, v, causal=causal, scale=scale))
    s = torch.cuda.Stream(device=out.device)
    x = torch.randn(DEVICE_LEFTOVER_SIZE, DEVICE_LEFTOVER_SIZE, device=out.device, dtype=torch.float16)
    s.wait_stream(torch.cuda.current_stream(out.device))
    with torch.cuda.stream(s):
        for _ in range(DEVICE_LEFTOVER_MATMULS):
            x @ x
    x.record_stream(s)


# ----------------------------------------------------------------------------- clocks (issue 47)

# The clock attacks hide this share of their own time from the timer (issue 47's kernel did).
CLOCK_HIDDEN_SHARE = 0.75
# What the clock attacks replaced, as (owner, name, what it held): ``unplant`` puts it back, so
# a test leaves its process as it found it whether or not the harness caught the attack.
PLANTED: list = []


def _plant(owner, name: str, value) -> None:
    PLANTED.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


def unplant(mark: int = 0) -> None:
    """Put back what the clock attacks replaced since ``mark`` entries were planted, latest first."""
    while len(PLANTED) > mark:
        owner, name, was = PLANTED.pop()
        setattr(owner, name, was)


def _real_ns():
    """The host clock as it was when this module was imported, before any attack here."""
    return _REAL_PERF_COUNTER_NS


def _timer_clock_globals() -> list[str]:
    """The globals of the harness's timer module that hold the host clock: the clock function
    itself, or the time module it is read from."""
    from harness.measurement.timing import timers

    real = _real_ns()
    return [n for n, v in vars(timers).items() if v is time or v is real]


def _skewed_time(now):
    """A stand-in for the time module whose perf_counter_ns is ``now``."""
    import types

    fake = types.ModuleType("time")
    fake.__dict__.update({k: v for k, v in vars(time).items() if not k.startswith("__")})
    fake.perf_counter_ns = now
    return fake


def _skew_by_own_time():
    """(compute, now): ``compute`` writes the right attention and hides CLOCK_HIDDEN_SHARE of
    its own duration from ``now``, a perf_counter_ns that lags the real one by all it hid."""
    real, hidden = _real_ns(), [0]

    def now():
        return real() - hidden[0]

    def compute(q, k, v, out, *, causal, scale):
        t0 = real()
        out.copy_(attention(q, k, v, causal=causal, scale=scale))
        hidden[0] += int(CLOCK_HIDDEN_SHARE * (real() - t0))

    return compute, now


def make_clock_replaced():
    """Issue 47: replaces time.perf_counter_ns (once) with a clock that lags by three quarters
    of every call's own duration, and computes the right attention."""
    compute, now = _skew_by_own_time()

    def clock_replaced(q, k, v, out, *, causal, scale):
        if time.perf_counter_ns is not now:
            _plant(time, "perf_counter_ns", now)
        compute(q, k, v, out, causal=causal, scale=scale)

    return clock_replaced


def make_timer_global_patched():
    """Rebinds the harness's own timer module global the host clock is read through (the clock
    function or the time module) to a skewed stand-in, and computes the right attention."""
    compute, now = _skew_by_own_time()
    fake_time = _skewed_time(now)

    def timer_global_patched(q, k, v, out, *, causal, scale):
        from harness.measurement.timing import timers

        for name in _timer_clock_globals():
            _plant(timers, name, fake_time if getattr(timers, name) is time else now)
        compute(q, k, v, out, causal=causal, scale=scale)

    return timer_global_patched


def make_clock_skewed_once():
    """Computes the right attention, then leaves the host clock (time.perf_counter_ns and the
    timer module's globals) replaced by a one-shot stand-in: its first reading, the timer's
    end of the window, puts every original back and reads three quarters of the call early.
    Between calls nothing is replaced: only a clock independent of these names sees it."""
    from harness.measurement.timing import timers

    real = _real_ns()

    def clock_skewed_once(q, k, v, out, *, causal, scale):
        t0 = real()
        out.copy_(attention(q, k, v, causal=causal, scale=scale))
        early = int(CLOCK_HIDDEN_SHARE * (real() - t0))
        mark = len(PLANTED)

        def once():
            unplant(mark)
            return real() - early

        for name in _timer_clock_globals():
            _plant(timers, name, _skewed_time(once) if getattr(timers, name) is time else once)
        _plant(time, "perf_counter_ns", once)

    return clock_skewed_once


def make_event_time_scaled():
    """Replaces torch.cuda.Event.elapsed_time with one that reads a quarter of the windows
    around its own calls (the CUDA-event form of issue 47), and computes the right attention."""
    import torch

    real, mine = torch.cuda.Event.elapsed_time, [False]

    def elapsed_time(self, end):
        ms = real(self, end)
        if mine[0]:
            mine[0] = False
            return 0.25 * ms
        return ms

    def event_time_scaled(q, k, v, out, *, causal, scale):
        if torch.cuda.Event.elapsed_time is not elapsed_time:
            _plant(torch.cuda.Event, "elapsed_time", elapsed_time)
        out.copy_(attention(q, k, v, causal=causal, scale=scale))
        mine[0] = True

    return event_time_scaled


def make_event_record_replaced():
    """Replaces torch.cuda.Event.record and .synchronize: the first event recorded after its
    own call goes on an idle side stream (it fires at once: the window closes before the call
    ran), and a synchronize that waits for the whole device stands in; computes the right attention."""
    import torch

    record, synchronize, mine = torch.cuda.Event.record, torch.cuda.Event.synchronize, [False]
    side: list = []

    def early_record(self, stream=None):
        if mine[0]:
            mine[0] = False
            if not side:
                side.append(torch.cuda.Stream())
            return record(self, side[0])
        return record(self, stream)

    def device_synchronize(self):
        torch.cuda.synchronize()

    def event_record_replaced(q, k, v, out, *, causal, scale):
        if torch.cuda.Event.record is not early_record:
            _plant(torch.cuda.Event, "record", early_record)
            _plant(torch.cuda.Event, "synchronize", device_synchronize)
        out.copy_(attention(q, k, v, causal=causal, scale=scale))
        mine[0] = True

    return event_record_replaced


def make_honest_then(honest_calls: int, cheat):
    """Honest for its first ``honest_calls`` calls (the gate's: count them), then ``cheat`` on
    every call: a lie only the timed calls tell."""
    state = {"n": 0}

    def honest_then(q, k, v, out, *, causal, scale):
        state["n"] += 1
        if state["n"] <= honest_calls:
            out.copy_(attention(q, k, v, causal=causal, scale=scale))
        else:
            cheat(q, k, v, out, causal=causal, scale=scale)

    honest_then.state = state
    return honest_then


# ----------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class Hollow:
    """A hollow kernel and how the gate must reject it."""

    name: str
    factory: Callable              # () -> kernel function (fresh state per call)
    tag: str                       # the gate's (or recheck's) expected first-failure tag
    caught_by: str = "gate"        # "gate", or "recheck" (recheck_in_place after a timed call)
    gpu: bool = False              # needs CUDA
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    gqa_only: bool = False         # the flaw only shows when H > Hkv
    loose_atol: float | None = None  # gate it with this atol (rtol 0) instead of the defaults

    def make(self):
        return self.factory()


def _plain(fn):
    return lambda: fn


ZOO: tuple[Hollow, ...] = (
    Hollow("softmax_omitted", _plain(softmax_omitted), "mismatch"),
    Hollow("no_max_subtraction", _plain(no_max_subtraction), "nonfinite"),
    Hollow("first_tiles_only", _plain(first_tiles_only), "mismatch"),
    Hollow("half_kv_sdpa", _plain(half_kv_sdpa), "mismatch"),
    Hollow("tail_unwritten", _plain(tail_unwritten), "unwritten"),
    Hollow("accumulator_reused", make_accumulator_reused, "stale_mismatch"),
    Hollow("cached_by_shape", make_cached_by_shape, "degenerate"),
    Hollow("cached_by_pointer", make_cached_by_pointer, "stale_mismatch", caught_by="recheck"),
    Hollow("stash_from_freed", make_stash_from_freed, "unwritten"),
    Hollow("side_stream", _plain(side_stream), "side_stream", gpu=True),
    Hollow("side_stream_fast", _plain(side_stream_fast), "side_stream", gpu=True),
    Hollow("side_stream_forked", _plain(side_stream_forked), "side_stream", gpu=True),
    Hollow("inputs_mutated", _plain(inputs_mutated), "input_mutated"),
    Hollow("lower_precision", _plain(lower_precision), "mismatch", dtypes=("float32",)),
    Hollow("wrong_gqa_mapping", _plain(wrong_gqa_mapping), "mismatch", gqa_only=True),
    Hollow("k_as_v", _plain(k_as_v), "mismatch"),
    Hollow("raises", _plain(raises), "exception"),
    Hollow("zero_output", _plain(zero_output), "degenerate", loose_atol=1e3),
    Hollow("threads_changed", _plain(threads_changed), "numerics_changed"),
    Hollow("affinity_changed", _plain(affinity_changed), "numerics_changed"),
    Hollow("leaves_host_thread", _plain(leaves_host_thread), "left_running"),
    Hollow("leaves_device_work", _plain(leaves_device_work), "left_running", gpu=True),
    Hollow("clock_replaced", make_clock_replaced, "clock_tampered"),
)
