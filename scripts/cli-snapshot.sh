#!/usr/bin/env bash
# Writes what `memwatch` prints for the bundled real data (captures, dumps, logs, traces)
# into OUTDIR, one file per command, so two builds can be compared byte for byte:
#   bash scripts/cli-snapshot.sh target/debug/memwatch /tmp/before
#   bash scripts/cli-snapshot.sh target/debug/memwatch /tmp/after && diff -r /tmp/before /tmp/after
# Every command's exit status is recorded in the file's last line.
set -uo pipefail
cd "$(dirname "$0")/.."
mw="$(readlink -f "${1:?memwatch binary}")"
out="${2:?output folder}"
mkdir -p "$out"
snap() { # name, args...
  local name="$1"; shift
  { "$mw" "$@" 2>&1; echo "[exit $?]"; } >"$out/$name.txt"
}
inc=testdata/h200/incidents/h200-jax0.11.2-oom-temp
mlp=testdata/h200/xla/h200-jax0.11.2-mlp
for cap in testdata/h200-captures/*.mwcap testdata/oom-corpus/*/capture.mwcap; do
  n="$(echo "$cap" | tr '/' '_' | sed 's/\.mwcap$//')"
  snap "report-$n" report "$cap"
  snap "report-json-$n" report --json "$cap"
  snap "trace-$n" report --trace "$cap"
  snap "runtime-$n" runtime "$cap"
  snap "runtime-json-$n" runtime --json "$cap"
done
for d in testdata/oom-corpus/*/; do
  n="$(basename "$d")"
  [ -f "$d/stderr.log" ] && snap "log-$n" log "$d/stderr.log" && snap "log-json-$n" log --json "$d/stderr.log"
  [ -d "$d/dump" ] && snap "xla-$n" xla report "$d/dump" && snap "runtime-dump-$n" runtime "$d/capture.mwcap" --xla-dump "$d/dump"
done
snap log-incident log "$inc/run.log" --xla-dump "$inc"
snap log-incident-json log --json "$inc/run.log" --xla-dump "$inc"
snap xla-mlp xla report "$mlp"
snap xla-mlp-json xla report --json "$mlp"
snap xla-cpu xla report testdata/cpu-jax0.10.2
for t in testdata/h200/bfc/h200-jax0.11.2/*.json; do
  n="$(basename "$t" .json)"
  [ -f "$t" ] && snap "replay-$n" replay "$t" --json 2>/dev/null
done
echo "wrote $(ls "$out" | wc -l) files to $out"
