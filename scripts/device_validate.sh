#!/usr/bin/env bash
# One device call: install, the GPU tests, the example sweep through the CLI, the measurement
# validation (tests/test_measurement_validation.py: control, do_bench, VRAM, NVML) and
# triton_decode's split counts (research/). Logs go to $OUT.
#   bash scripts/device_validate.sh [quick]      (quick: the first two only)
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $* ($(date +%T))"; }
log install
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>&1 | tee -a "$OUT/gpu.txt"

log "gpu tests"
timeout 330 python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider 2>&1 | tail -40 > "$OUT/gpu-tests.txt"
tail -5 "$OUT/gpu-tests.txt"

log "example sweep (CLI, fresh clone)"
work=$(mktemp -d)
# The bundle (see device_sweep.sh) has this repository's commits; without it, a fresh repo
# of the copied tree. Never `git clone .`: a .git left on the device from an earlier
# session once made this sweep run that session's commit instead of the copied tree.
if [ -s .cache/repo.bundle ]; then git clone -q .cache/repo.bundle "$work/p" && (cd "$work/p" && git checkout -q main)
else cp -r . "$work/p" && (cd "$work/p" && rm -rf .git && git init -q && git add -A && git -c user.email=d@d -c user.name=d commit -qm device); fi
( cd "$work/p" && { [ -s ledger/example.jsonl ] || python3 -m harness register example; } \
  && timeout 150 python3 -m harness sweep example && python3 -m harness ledger verify example \
  && python3 -m harness ledger show example ) > "$OUT/example-sweep.txt" 2>&1
echo "example sweep rc=$?"; tail -12 "$OUT/example-sweep.txt"
cp "$work/p/ledger/example.jsonl" "$OUT/example-ledger.jsonl" 2>/dev/null

if [ "${1:-}" != quick ]; then
  log "measurement validation"
  timeout 420 python3 -m pytest -q -m "gpu and slow" -p no:cacheprovider tests/test_measurement_validation.py \
    > "$OUT/measurement-log.txt" 2>&1
  echo "measurement rc=$?"; tail -40 "$OUT/measurement-log.txt"
  log "decode split counts"
  timeout 150 python3 -m research.explore_decode_splits > "$OUT/decode-splits-log.txt" 2>&1
  echo "decode splits rc=$?"; grep -E "^\(" "$OUT/decode-splits-log.txt"
fi
log done
