"""The correctness gate: a candidate kernel's output against the float64 reference.

The fused-attention campaign's hollow decode kernel compiled, launched and produced finite,
plausible floats with no softmax in it; the llama-bench decode artifact read 7.9% of the KV
cache; the Sakana incident returned the reference's own result from memory the reference
had just freed. So the gate checks more than closeness on one random input:

* adversarial input families (``harness.workloads.inputs``) and boundary sequence lengths;
* every output poisoned with a NaN of a private bit pattern before every call, so an
  unwritten element is told apart from a computed NaN (a workload may declare several
  outputs: each is judged against its own reference, and reasons name it);
* the candidate runs BEFORE the reference exists, then again AFTER it on fresh buffers:
  both must pass and agree (stale memory, accumulators carried across calls);
* q, k, v are compared to pristine copies (a kernel must not write its inputs);
* an output bit-identical to an earlier input's, or exactly constant along an axis where
  the reference is not, is degenerate however loose the tolerance;
* on CUDA only the current stream is synchronized before ``out`` is read, so work left on a
  side stream shows up as unwritten; and ``side_stream_check`` holds the caller's stream
  while the kernel is called, so work on a stream that does not wait for it shows up
  however fast it is;
* an exception from the kernel is a failing check carrying its text, never swallowed.

The gate's calls, the recheck after timing and the timed outputs all go through one check
sequence (``checks.check_call``/``checks.check_output``): poison → call → unwritten →
non-finite → compare, over every output of the call, with the failing output, seed, element,
error and ULPs in the reason. The timed path poisons with ``poison_`` too, so an output a
timed call never wrote is reported as unwritten.

Every failure is one readable line plus a short tag (``results.FAILURE_TAGS``) for sweep
summaries.

    gate.py          gate(): every seed × family × boundary config, before timing; checksum()
    after_timing.py  recheck_in_place(), check_timed_output(): the checks after timing
    side_stream.py   side_stream_check(): work on a stream that does not wait for the caller's
    checks.py        the check sequence one call goes through (poison → call → compare → judge), over its outputs
    figures.py       compare(), ErrorFigures, ulp(): one output against the reference; default tolerances
    figures_fused.py compare()'s block table in one Triton pass on a GPU (the same figures; imports triton)
    poison.py        the poison NaN, unwritten elements, bit-exact comparisons
    results.py       CheckReport, GateResult and the failure tags
    vram.py          gate_bytes(), compare_bytes(): the checks' device bytes, for the VRAM model

Import from the module; the package re-exports nothing.
"""
