"""The registration schema's version, keys and defaults: which keys each table takes and
the schema that introduced a key or a metric. The parsers (sections, cross_checks) and the
reductio read these; schema.py re-exports them."""

from __future__ import annotations

REGISTRATION_SCHEMA = 7
DEFAULT_BASELINE = "cublas_stack"
# The workload of a registration that names none (every registration before workloads were plugins).
DEFAULT_WORKLOAD = "attention"
DEFAULT_PRIMARY = "geomean(speedup)"
# Tolerances are >= 0 (atol 0 with rtol > 0 is a pure relative bar) and below this (a
# "tolerance" of 1 accepts anything).
MAX_TOLERANCE = 0.5
# Refuse grids that would take a night per line by accident.
MAX_GRID_CONFIGS = 4096
# Seeds are checked one by one against a float64 reference; 1000 is far past any use
# (shape-aware attention used 40) and keeps a typo from building a million-seed line.
MAX_SEEDS = 1000

# The keys each table takes: any other is refused, naming these.
TOP_KEYS = {"schema", "hypothesis", "workload", "candidate", "candidates", "baseline", "amends", "grid",
            "correctness", "timing", "numerics", "bar", "notes", "verify", "integration", "replication"}
# [grid]'s keys are its workload's axes (harness.workloads.api.Workload.grid_keys).
CORRECTNESS_KEYS = {"atol", "rtol", "seeds", "families", "min_pass_rate", "accept_weak"}
BAR_KEYS = {"go", "prediction", "primary", "include_noisy", "allow_missing", "min_coverage", "mixed_devices",
            "beyond_ceiling_ok"}
# (table, key) -> the schema that introduced it: a bench older than that refuses the file
# ("upgrade bench") instead of misreading it, so a file using the key must say that schema.
KEY_SCHEMA = {("bar", "mixed_devices"): 2, ("numerics", "num_threads"): 2, ("bar", "beyond_ceiling_ok"): 3,
              ("grid", "tokens"): 5,
              # the statistic stop (timing/criteria.py): an older bench would stop on noise instead
              ("timing", "stop"): 6, ("timing", "precision"): 6, ("timing", "alpha"): 6,
              # replications the verdict waits for (registration/replication.py): an older bench would close without them
              ("replication", "instances"): 7, ("replication", "combine"): 7}
# The schema that introduced a bar clause against a peer candidate (``speedup vs "P"``).
PEER_SCHEMA = 5
# Bar metrics -> the schema that introduced them: a bench older than that refuses the metric's
# name, so a file naming one must say that schema (the clock-normalised figures: cycles per
# call, the rate at a stated SM clock; the next-run interval, issue 48: an older bench would refuse
# its names).
METRIC_SCHEMA = {"cycles": 6, "tflops_at": 6, "speedup_next_low": 7, "speedup_next_high": 7}
# A verdict needs every registered pair decided unless [bar] min_coverage says less
# (allow_missing = true, the older key, means min_coverage = 0 unless it is given).
DEFAULT_MIN_COVERAGE = 1.0
VERIFY_KEYS = {"clauses"}
