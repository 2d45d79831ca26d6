#!/usr/bin/env bash
# The dashboard's run page of long captures (issue 38): imports each capture with each
# memwatch binary named (a database of one build may hold migrations another does not
# know), serves it with that binary and prints
# the wall time of the run page (/runs/1) and of the images it loads (the framework
# view's memory/stack/lanes SVGs of device 0) and their bytes: the first request after
# the server started (the framework builder may still be working) and the median of 5
# after it.
#
# Usage: bash bench/run_page.sh MEMWATCH [BASELINE] -- CAPTURE...
# Wall times: run it when the machine is quiet, and name the machine with the figures.
set -euo pipefail
builds=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  builds+=("$(readlink -f "$1")")
  shift
done
shift || true
[ ${#builds[@]} -gt 0 ] && [ $# -gt 0 ] || {
  echo "usage: bash bench/run_page.sh MEMWATCH [BASELINE] -- CAPTURE..." >&2
  exit 2
}
work="$(mktemp -d)"
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-16s %-26s %-40s %12s %10s %10s\n' capture build url bytes "first s" "median s"
for cap in "$@"; do
  name=$(basename "$cap" .mwcap)
  for bin in "${builds[@]}"; do
    "$bin" import "$cap" --db "$work/serve.db" > /dev/null
    "$bin" serve --db "$work/serve.db" --listen "127.0.0.1:$port" \
      --ingest "127.0.0.1:$((port + 1))" > "$work/serve.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do
      curl -s -o /dev/null "http://127.0.0.1:$port/" && break
      sleep 0.1
    done
    for url in /runs/1 "/runs/1/framework/memory.svg?device=0" \
      "/runs/1/framework/stack.svg?device=0" "/runs/1/framework/lanes.svg?device=0"; do
      times=()
      for i in 0 1 2 3 4 5; do
        r=$(curl -s -o "$work/body" -w '%{http_code} %{time_total} %{size_download}' \
          "http://127.0.0.1:$port$url")
        times+=("$(echo "$r" | cut -d' ' -f2)")
        bytes=$(echo "$r" | cut -d' ' -f3)
      done
      med=$(printf '%s\n' "${times[@]:1}" | sort -n | sed -n 3p)
      printf '%-16s %-26s %-40s %12s %10s %10s\n' "$name" "$(basename "$(dirname "$bin")")/$(basename "$bin")" \
        "$url" "$bytes" "${times[0]}" "$med"
    done
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
    rm -f "$work/serve.db"*
  done
done
