#!/usr/bin/env bash
# Long PyTorch memory snapshots, recorded on the GPU and read by memwatch on the same
# machine (issue 35): about 1 MB with each setting varied (stacks all/python, context
# all/state/alloc, enabled=state, a wrapped ring, expandable segments, two devices when
# there are two, a snapshot the user pickled from torch.cuda.memory._snapshot()), about
# 5 MB (stacks all), about 250 MB and at least 1 GB (stacks python, one recording dumped
# twice; LONG_2GB=1: three times). Each dump has PyTorch's figures beside it (NAME.json); `memwatch report --json`
# must equal them (allocated, reserved, segments, active blocks, the replay ending on
# the dump) and, up to 300 MB, Python's own reading of the file (segments, blocks,
# bytes, bytes by Python line, trace entries): "NAME: OK" / "NAME: FAIL" per snapshot.
# Then memwatch report, memwatch import --db (SQLite) and Python's pickle.load side by
# side on the >= 1 GB snapshot: seconds and peak RSS.
#   bash tests/gpu/torch_snapshots_long.sh OUT [MEMWATCH]    (default target/release/memwatch)
# OUT gets summary.txt, every NAME.json / NAME.report.json, bench.txt, and the snapshots
# under 2 MB (small/, for testdata); large ones are recorded in $WORK (default a
# temporary directory, removed at the end unless KEEP=1).
# LONG_GB=1.1 sets the large target in GB; LONG_2GB=1 also dumps a ~2.2 GB snapshot.
# SMALL_CASES="python_all all_state" runs only those small cases; MEDIUM=0 skips the medium one;
# LARGE=0 skips the large ones.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="$(mkdir -p "${1:?usage: torch_snapshots_long.sh OUT [MEMWATCH]}" && cd "$1" && pwd)"
mw="$(realpath "${2:-target/release/memwatch}")"
py="${PYTHON:-python3}"
tool=tests/gpu/torch_snapshots_long.py
work="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/mw-long-snap.XXXXXX")}"
mkdir -p "$work" "$out/small"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
summary="$out/summary.txt"
: > "$summary"
start=$SECONDS
say() { echo "[$((SECONDS - start)) s] $*" | tee -a "$summary"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$py" -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())'; git rev-parse --short HEAD 2>/dev/null; nproc; } >> "$summary" 2>&1
[ -x "$mw" ] || { say "no memwatch at $mw"; exit 2; }
fail=0

# record CASE ITERATIONS...: records in $work, logs in $out.
record() {
    local case=$1; shift
    local conf=""
    [ "$case" = expandable ] && conf="expandable_segments:True"
    PYTORCH_CUDA_ALLOC_CONF="$conf" "$py" "$tool" record "$case" "$work" "$@" > "$out/$case.log" 2>&1 \
        || { say "$case: recording failed: $(tail -3 "$out/$case.log")"; fail=1; return 1; }
    grep -h SKIP "$out/$case.log" | tee -a "$summary"
    return 0
}

# check NAME: memwatch report, then the comparison (with Python's reading up to 300 MB).
check() {
    local name=$1 snap="$work/$1.pickle"
    [ -f "$snap" ] || return 0
    cp "$work/$name.json" "$out/$name.json"
    local t=$SECONDS
    "$mw" report "$snap" --json > "$out/$name.report.json" 2> "$out/$name.report.err" \
        || { say "$name: FAIL memwatch report: $(head -c 400 "$out/$name.report.err")"; fail=1; return; }
    local mw_s=$((SECONDS - t))
    local size; size=$(stat -c %s "$snap")
    local pyflag=""
    [ "$size" -le 300000000 ] && pyflag=--python
    "$py" "$tool" check "$snap" "$work/$name.json" "$out/$name.report.json" $pyflag >> "$out/checks.txt" 2>&1 || fail=1
    say "$(tail -1 "$out/checks.txt") [memwatch report ${mw_s} s]"
    [ "$size" -lt 2000000 ] && cp "$snap" "$work/$name.json" "$out/small/"
}

say "small snapshots (about 1 MB), one setting varied each"
small="${SMALL_CASES:-python_all python_alloc python_ring state_only expandable user_pickled two_devices all_all all_state}"
for c in $small; do
    case "$c" in all_*) n=1200 ;; *) n=2000 ;; esac
    record "$c" "$n" && check "$c"
done
if [ "${MEDIUM:-1}" = 1 ]; then
    say "medium (stacks all, 20,000 iterations: the issue's 4.9 MB refusal)"
    record medium 20000 && check medium
fi

# The large recording: dumped after 500,000 iterations (about 250 MB), then at the sizes
# asked (iterations from the bytes per iteration of the dump before).
gb="${LONG_GB:-1.1}"
targets="$("$py" -c 'import sys; print(int(float(sys.argv[1]) * 1e9))' "$gb")b"
[ "${LONG_2GB:-0}" = 1 ] && targets="$targets 2200000000b"
counts="500000 $targets"
if [ "${LARGE:-1}" = 0 ]; then
    say "large skipped (LARGE=0)"
elif say "large (stacks python): iterations/sizes $counts"; record large $counts; then
    for n in large large_2 large_3; do check "$n"; done
fi

big="$work/large_2.pickle"
[ -f "$work/large_3.pickle" ] && big="$work/large_3.pickle"
if [ -f "$big" ]; then
    say "side by side on $(basename "$big") ($(stat -c %s "$big") bytes)"
    timev=""
    /usr/bin/time -v true 2>/dev/null && timev=/usr/bin/time
    run() {  # run FILE LABEL CMD...: wall time and peak RSS (details in bench.FILE.*)
        local file=$1 label=$2; shift 2
        if [ -n "$timev" ]; then
            "$timev" -v "$@" > /dev/null 2> "$out/bench.$file.time"
            local rc=$?
            local wall rss
            wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$out/bench.$file.time")
            rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$out/bench.$file.time")
            printf '%-28s %12s %14s %4s\n' "$label" "$wall" "${rss} MiB" "$rc"
        else
            "$py" "$tool" measure "$out/bench.$file.json" -- "$@"
            "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%-28s %12s %14s %4s" % (sys.argv[2], "%.2f s" % j["seconds"], "%.0f MiB" % (j["max_rss_kib"]/1024), j["rc"]))' "$out/bench.$file.json" "$label"
        fi
    }
    {
        echo "file: $(basename "$big"), $(stat -c %s "$big") bytes; $(nproc) CPUs; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
        printf '%-28s %12s %14s %4s\n' "reader" "wall" "peak RSS" "rc"
        run report "memwatch report --json" "$mw" report "$big" --json
        rm -f "$work/bench.db"
        run import "memwatch import --db" "$mw" import "$big" --db "$work/bench.db"
        run pickle_load "python3 pickle.load" "$py" "$tool" load "$big"
    } | tee "$out/bench.txt" | tee -a "$summary"
fi
say "done; $(grep -c ': OK' "$out/checks.txt" 2>/dev/null) OK, $(grep -c ': FAIL' "$out/checks.txt" 2>/dev/null) FAIL"
exit $fail
