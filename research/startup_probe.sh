# Where a sweep's time outside its configs goes (issue 32): a one-config copy of a line
# (seq_len $SEQ_LEN, default 4096; the line's first dtype; not causal) swept twice under cProfile and -X importtime, once
# through a worker process (the default) and once --inline, each in a scratch git repository
# after `bench warm`. Writes WORKERS/INLINE .prof, .imports and .log files and walls.txt.
# Usage, from the repository root:  bash research/startup_probe.sh LINE OUTDIR
set -e
ROOT=$(pwd); LINE=$1; OUT=$2
mkdir -p "$OUT"
mk() {
  R=$(mktemp -d); cd "$R"; git init -q; git config user.email a@b; git config user.name a
  mkdir registrations ledger
  sed -e "s/^seq_len = .*/seq_len = [${SEQ_LEN:-4096}]/" -e 's/^dtype = \[\([^],]*\).*/dtype = [\1]/' -e 's/^causal = .*/causal = [false]/' \
      -e '/^amends/d' "$ROOT/registrations/$LINE.toml" > registrations/one.toml
  cp "$ROOT/ledger/_device_ceilings.jsonl" ledger/ 2>/dev/null || true
  git add -A; git commit -qm x; python3 -m harness register one > /dev/null; git add -A; git commit -qm r
}
mk; python3 -m harness warm one > /dev/null 2>&1 || true
cd "$ROOT"
for how in workers inline; do
  mk
  extra=""; [ $how = inline ] && extra="--inline"
  t0=$(python3 -c "import time;print(time.time())")
  python3 -X importtime -m cProfile -o "$OUT/$how.prof" -m harness sweep one $extra > "$OUT/$how.log" 2> "$OUT/$how.imports"
  python3 -c "import time;print('$how wall', round(time.time()-$t0,2))" >> "$OUT/walls.txt"
  cd "$ROOT"
done
cat "$OUT/walls.txt"; grep -h "harness time\|([0-9.]* s)" "$OUT"/*.log | cut -c1-160
