#!/usr/bin/env bash
# Sweep (and optionally decide) a registered line on the lent GPU with real commit stamps.
#
# The device receives a copy of the working tree without .git, so a sweep there cannot be
# stamped with this repository's commits. Carry a git bundle instead:
#   here:    mkdir -p .cache && git bundle create .cache/repo.bundle HEAD main   (.cache/ is git-ignored)
#   device:  run(carry=[".cache"], command="bash scripts/device_sweep.sh flash-h200 [--verdict]")
# The clone has the same commits, so its ledger rows chain onto the committed ones; copy
# $OUT/<line>.jsonl back over ledger/<line>.jsonl, check `bench ledger verify`, commit.
set -uo pipefail
line=${1:?usage: device_sweep.sh LINE [--verdict]}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
src=$PWD
work=$(mktemp -d)
git clone -q .cache/repo.bundle "$work/repo" || { echo "no .cache/repo.bundle: see the header of this script"; exit 2; }
cd "$work/repo" || exit 2
git -c advice.detachedHead=false checkout -q main 2>/dev/null || true
# A sweep resumed across calls: the carried working tree's ledger files (uncommitted rows
# from an earlier call at the same commit) replace the committed ones; the sweep verifies
# their chain and git anchor before it appends anything.
for f in "ledger/$line.jsonl" ledger/_device_ceilings.jsonl; do
  if [ -s "$src/$f" ] && ! cmp -s "$src/$f" "$f"; then cp "$src/$f" "$f" && echo "resuming from the carried $f"; fi
done
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this clone's code, installed or not
python3 -m harness warm "$line" > "$OUT/warm-$line.log" 2>&1; tail -1 "$OUT/warm-$line.log"
# SWEEP_TIMEOUT_S (default: none) ends the sweep with SIGTERM, which it takes as a graceful
# stop (configs in flight finish, exit 143): the rows so far are still copied to $OUT below.
timeout -s TERM "${SWEEP_TIMEOUT_S:-0}" python3 -m harness sweep "$line" 2>&1 | tee "$OUT/sweep-$line.log"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && [ "${2:-}" = --verdict ]; then
  python3 -m harness verdict "$line" 2>&1 | tee "$OUT/verdict-$line.log"
fi
python3 -m harness ledger verify "$line" | tee -a "$OUT/sweep-$line.log"
cp "ledger/$line.jsonl" "$OUT/$line.jsonl"
cp ledger/_device_ceilings.jsonl "$OUT/" 2>/dev/null
exit "$rc"
