#!/usr/bin/env bash
# Issue 38 on a GPU (H200, JAX 0.11 with its CUDA plugin): reading the capture of a long
# JAX loop takes time linear in the capture. Records `long_jax.py` (each step's output
# kept in a dict, so XLA's BFC pool fills and every later execution fails) under
# `memwatch run`, killed by `timeout -s KILL` as the original run was stopped (the
# capture ends without the program's process_end):
#   A. f32[2048,2048], XLA_PYTHON_CLIENT_MEM_FRACTION=0.08, 100,000 steps, killed at 100 s
#      (the issue's program);
#   B. f32[64,64], XLA_PYTHON_CLIENT_MEM_FRACTION=0.02 (fills after ~170k steps),
#      1,000,000 steps, killed at 120 s if not done.
# Then times `memwatch report --json`, `diagnose` (with the run's stderr log and XLA
# dump), `runtime --json` and `import --db` on each capture (each stopped at
# MEMWATCH_LONG_JAX_LIMIT seconds, default 120), and prints events, seconds and seconds
# per million events, with the time `memwatch run` took from the command's exit to its
# verdict (MEMWATCH_RUN_TIMING=1). Writes results.txt and the captures (zstd- or
# xz-compressed when over 16 MiB, split in 15 MiB parts when still larger) to OUTDIR.
# Takes 6-8 minutes.
#
#   bash tests/gpu/long_jax.sh [MEMWATCH] [OUTDIR]
#
# MEMWATCH: default target/release/memwatch (the shim beside it); OUTDIR: default $OUT,
# else /tmp/memwatch-long-jax. Build first: cargo build --release -p memwatch -p
# memwatch-preload. Exit 1 when a command failed or ran past its limit.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
mw="$(readlink -f "${1:-$root/target/release/memwatch}")"
out="${2:-${OUT:-/tmp/memwatch-long-jax}}"
py="${PYTHON:-python3}"
limit="${MEMWATCH_LONG_JAX_LIMIT:-120}"
mkdir -p "$out"
work="$(mktemp -d /tmp/memwatch-long-jax.XXXXXX)"
trap 'rm -rf "$work"' EXIT
res="$out/results.txt"
: > "$res"
say() { echo "$*" | tee -a "$res"; }
status=0

say "long_jax.sh: $(date -u +%FT%TZ), memwatch $("$mw" --version 2>/dev/null | head -1), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
say "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
"$py" -c 'import jax; print("jax", jax.__version__, jax.devices())' 2>&1 | tee -a "$res" || exit 2

# record NAME N STEPS FRACTION SECONDS
record() {
  local name=$1 n=$2 steps=$3 fraction=$4 seconds=$5 t0 t1
  local cap="$work/$name.mwcap"
  t0=$(date +%s.%N)
  XLA_PYTHON_CLIENT_MEM_FRACTION=$fraction MEMWATCH_RUN_TIMING=1 \
    timeout -s KILL $((seconds + 240)) "$mw" run --out "$cap" --xla-dump "$work/$name-dump" \
    --stderr-log "$work/$name.stderr.log" -- \
    timeout -s KILL "$seconds" "$py" "$here/long_jax.py" "$n" "$steps" \
    > "$work/$name.stdout" 2> "$work/$name.run.err"
  local rc=$?
  t1=$(date +%s.%N)
  say "== $name: f32[$n,$n], $steps steps, XLA_PYTHON_CLIENT_MEM_FRACTION=$fraction, killed at $seconds s"
  say "  memwatch run exit $rc after $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s; program: $(tail -1 "$work/$name.stdout")"
  say "  after the command's exit: $(grep -o 'done [0-9.]* s after the command exited' "$work/$name.run.err" || echo 'no timing line (memwatch run stopped?)')"
  say "  verdict: $(grep -m1 -o '^\[1\] .*' "$work/$name.run.err" || echo none)"
  say "  capture: $(du -m "$cap" | cut -f1) MiB; stderr log: $(wc -l < "$work/$name.stderr.log") lines, $(grep -c 'ran out of memory\|RESOURCE_EXHAUSTED' "$work/$name.stderr.log") out-of-memory lines"
}

# timed NAME LABEL CMD...: runs CMD (stdout to $work/NAME.LABEL.out) within $limit s;
# sets secs and note.
timed() {
  local name=$1 label=$2 t0 t1 rc
  shift 2
  t0=$(date +%s.%N)
  timeout -s KILL "$limit" "$@" > "$work/$name.$label.out" 2> "$work/$name.$label.err"
  rc=$?
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
  note=""
  if [ "$rc" = 137 ]; then
    note=" STOPPED at the ${limit} s limit"; status=1
  elif [ "$rc" != 0 ] && [ "$label" != diagnose ]; then
    note=" exit $rc: $(head -c 300 "$work/$name.$label.err")"; status=1
  fi
}

line() { # LABEL: one line of seconds and seconds per million events
  printf '  %-9s %8s s  %8s s per million events%s\n' "$1" "$secs" \
    "$(awk -v s="$secs" -v e="$events" 'BEGIN{ if (e > 0) printf "%.2f", s / (e / 1e6); else print "?" }')" \
    "$note" | tee -a "$res"
}

analyse() {
  local name=$1 cap="$work/$1.mwcap"
  timed "$name" report "$mw" report --json "$cap"
  events=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["events"])' "$work/$name.report.out" 2>/dev/null || echo 0)
  say "  $name: $events events ($(awk -v e="$events" 'BEGIN{printf "%.2f", e / 1e6}') M)"
  line report
  timed "$name" diagnose "$mw" diagnose "$cap" "$work/$name.stderr.log" --xla-dump "$work/$name-dump"
  line diagnose
  say "  diagnose verdict: $(grep -m1 -o '^\[1\] .*' "$work/$name.diagnose.out" || head -c 200 "$work/$name.diagnose.err")"
  timed "$name" runtime "$mw" runtime --json "$cap"
  line runtime
  rm -f "$work/$name.db"
  timed "$name" import "$mw" import "$cap" --db "$work/$name.db"
  line import
  rm -f "$work/$name.db" "$work/$name".*.out
}

keep() { # copies a capture to $out: whole, compressed, or compressed in 15 MiB parts
  local name=$1 f="$work/$1.mwcap" z
  if [ "$(stat -c %s "$f")" -le $((16 << 20)) ]; then
    cp "$f" "$out/"
    z="$out/$name.mwcap"
  elif command -v zstd > /dev/null; then
    zstd -q -10 -T0 --long=27 "$f" -o "$work/$name.mwcap.zst"; z="$work/$name.mwcap.zst"
  else
    xz -9 -T0 -k -c "$f" > "$work/$name.mwcap.xz"; z="$work/$name.mwcap.xz"
  fi
  if [ "$z" != "$out/$name.mwcap" ]; then
    if [ "$(stat -c %s "$z")" -le $((16 << 20)) ]; then
      mv "$z" "$out/"
    else
      split -b 15M -d "$z" "$out/$(basename "$z").part"
    fi
  fi
  say "  kept: $(cd "$out" && ls -1 "$name".mwcap* | paste -sd ' ') ($(cd "$out" && du -cm "$name".mwcap* | tail -1 | cut -f1) MiB)"
}

record A 2048 100000 0.08 100
analyse A
keep A
record B 64 1000000 0.02 120
analyse B
keep B
for n in A B; do
  { echo "--- $n: memwatch run's stderr (last 40 lines)"; tail -40 "$work/$n.run.err"; } >> "$res"
done
say "long_jax.sh: $([ $status = 0 ] && echo ok || echo FAILED)"
exit $status
