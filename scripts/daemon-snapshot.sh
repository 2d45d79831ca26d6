#!/usr/bin/env bash
# Records what the daemon answers over a database holding the bundled real data, one file
# per request, so two builds can be compared byte for byte (refactors of the daemon):
#
#   bash scripts/daemon-snapshot.sh build MEMWATCH DB        # import the bundled data into DB
#   bash scripts/daemon-snapshot.sh dump  MEMWATCH DB OUTDIR # serve a copy of DB, save answers
#   bash scripts/daemon-snapshot.sh compare A B [--mask]     # diff two OUTDIRs (exit 1 on a difference)
#
# The same DB served by two builds compares the read path exactly. Two DBs built by two
# builds compare the ingest path too; there `--mask` blanks what differs between any two
# imports (wall-clock times of the import: created_unix_ns, first/last_seen_unix_ns and
# the dates printed from them). `dump` serves a copy, so DB is never changed.
#
# DB holds: the H200 JAX capture, OOM-corpus captures (JAX BFC/platform/cuda_async,
# PyTorch, CuPy, two processes, pinned host memory), one with its XLA dump attached, the
# H200 OOM incident log with its dump, a dump on its own, and three gate runs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

corpus=(jax_leak_bfc jax_leak_platform jax_leak_cuda_async jax_exec_temp two_processes
  torch_leak torch_fragmentation cupy_limit host_pinned jax_co_resident)

build() { # MEMWATCH DB (what the imports print goes to DB.out)
  local mw db=$2
  mw="$(readlink -f "$1")"
  rm -f "$db" "$db-wal" "$db-shm"
  exec 3>"$db.out"
  set -e
  for cap in testdata/h200-captures/*.mwcap; do
    "$mw" import "$cap" --db "$db" --run "h200:$(basename "$cap" .mwcap)" --json >&3
  done
  for c in "${corpus[@]}"; do
    local d=testdata/oom-corpus/$c
    if [ "$c" = jax_leak_bfc ]; then
      "$mw" import "$d/capture.mwcap" --db "$db" --run "corpus:$c" --xla-dump "$d/dump" --json >&3
    else
      "$mw" import "$d/capture.mwcap" --db "$db" --run "corpus:$c" --json >&3
    fi
  done
  local inc=testdata/h200/incidents/h200-jax0.11.2-oom-temp
  "$mw" import --db "$db" --log "$inc/run.log" --xla-dump "$inc" --mem-fraction 0.025 --json >&3
  "$mw" import --db "$db" --xla-dump testdata/h200/xla/h200-jax0.11.2-mlp >&3
  local base=$db.baseline.toml
  rm -f "$base"
  "$mw" gate --baseline "$base" --run train=2 --run leak=3 --db "$db" --update >&3 2>&1
  "$mw" gate --baseline "$base" --run train=2 --run leak=3 --db "$db" >&3 2>&1
  "$mw" gate --baseline "$base" --run train=5 --run leak=3 --db "$db" >&3 2>&1 || true
  exec 3>&-
  set +e
  echo "built $db"
}

dump() { # MEMWATCH DB OUTDIR
  local mw db=$2 out=$3
  mw="$(readlink -f "$1")"
  mkdir -p "$out"
  local work
  work=$(mktemp -d)
  cp "$db" "$work/db"
  local port ingest
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  ingest=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$mw" serve --db "$work/db" --listen "127.0.0.1:$port" --ingest "127.0.0.1:$ingest" >"$work/serve.log" 2>&1 &
  local pid=$!
  python3 "$ROOT/scripts/daemon_snapshot.py" "http://127.0.0.1:$port" "$out"
  local rc=$?
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -rf "$work"
  return $rc
}

case "${1:-}" in
  build) build "${2:?memwatch binary}" "${3:?database}" ;;
  dump) dump "${2:?memwatch binary}" "${3:?database}" "${4:?output folder}" ;;
  compare) python3 "$ROOT/scripts/daemon_snapshot.py" --compare "${2:?folder A}" "${3:?folder B}" "${4:-}" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
