"""The input seeds derived from a line's registered seeds, in one place: each later check
draws its inputs from the first registered seed plus an offset of its own, so none reuses
the gate's inputs (a kernel could have seen those) and none collides with another's. A
registration's seeds are below MAX_SEEDS (registration/schema_keys.py), far under the
smallest offset; the offsets are primes a million apart so two checks' seeds never meet."""

from __future__ import annotations

# The post-timing recheck's fresh inputs.
RECHECK_SEED_OFFSET = 1_000_003
# The timed calls' input slots (slot s: the first seed + this + s).
TIMING_SEED_OFFSET = 2_000_003
# The profiled call's inputs (`bench profile`, a [verify] line's counter pass).
PROFILE_SEED_OFFSET = 3_000_017
