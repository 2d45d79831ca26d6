#!/usr/bin/env bash
# PyTorch memory snapshots of allocator paths the fixtures lack (expandable segments, side
# streams, a ring-buffer-cut trace, power-of-two rounding + max_split_size, empty_cache),
# recorded on the GPU with PyTorch's own figures, then read by memwatch on the same
# machine: `memwatch report --json` must give memory_allocated / memory_reserved at the
# dump exactly and replay to the dump's blocks ("end_check" consistent); full traces also
# their maxima. Everything lands in OUT (snapshots, figures, reports, summary.txt).
#   bash tests/gpu/torch_snapshots.sh OUT [MEMWATCH]     (default target/release/memwatch)
set -uo pipefail
cd "$(dirname "$0")/../.."
out="$(mkdir -p "${1:?usage: torch_snapshots.sh OUT [MEMWATCH]}" && cd "$1" && pwd)"
mw="${2:-target/release/memwatch}"
py="${PYTHON:-python3}"
summary="$out/summary.txt"
: > "$summary"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$py" -c 'import torch; print("torch", torch.__version__)'; git rev-parse --short HEAD; } >> "$summary" 2>&1
fail=0
for case in expandable streams ring roundup empty_cache; do
    conf=""
    case $case in
        expandable) conf="expandable_segments:True" ;;
        roundup) conf="roundup_power2_divisions:4,max_split_size_mb:64" ;;
    esac
    PYTORCH_CUDA_ALLOC_CONF="$conf" "$py" tests/gpu/torch_snapshots.py "$case" "$out" > "$out/$case.log" 2>&1 \
        || { echo "$case: the program failed (see $case.log)" >> "$summary"; fail=1; continue; }
    "$mw" report "$out/$case.pickle" --json > "$out/$case.report.json" 2> "$out/$case.report.err" \
        || { echo "$case: memwatch report failed: $(cat "$out/$case.report.err")" >> "$summary"; fail=1; continue; }
    "$mw" report "$out/$case.pickle" > "$out/$case.report.txt" 2>&1
    "$py" - "$out/$case.json" "$out/$case.report.json" "$case" >> "$summary" <<'PY' || fail=1
import json, sys
fig, rep, case = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
f, d = fig["at_dump"], rep["devices"][0]
checks = {
    "allocated at dump": (d["allocated_bytes"], f["memory_allocated"]),
    "reserved at dump": (d["reserved_bytes"], f["memory_reserved"]),
    "replay ends on the dump": (d["end_check"]["missing"] + d["end_check"]["extra"] + d["end_check"]["size_mismatches"], 0),
}
if d["before_trace"]["blocks"] + d["before_trace"]["segments"] == 0:
    checks["peak allocated"] = (d["peak_allocated"]["bytes"], f["max_memory_allocated"])
    checks["peak reserved"] = (d["peak_reserved"]["bytes"], f["max_memory_reserved"])
bad = {k: v for k, v in checks.items() if v[0] != v[1]}
print(f"{case}: {'OK' if not bad else 'MISMATCH'} {len(checks) - len(bad)}/{len(checks)}",
      {k: {"memwatch": a, "pytorch": b} for k, (a, b) in bad.items()} or "",
      f"anomalies={d['anomalies']}", f"ooms={d['ooms_total']}", f"settings={rep['allocator_settings']['raw']}")
sys.exit(1 if bad else 0)
PY
done
cat "$summary"
exit $fail
