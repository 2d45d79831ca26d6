#!/usr/bin/env bash
# Short cargo-fuzz run of every parser target (issue 3), for CI: a few seconds each.
# cargo-fuzz needs nightly-only flags (-Zsanitizer); with the one stable toolchain here it
# runs with RUSTC_BOOTSTRAP=1. Installs cargo-fuzz from crates.io on first use.
#   scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
cd fuzz
mkdir -p corpus
for t in buffer_assignment hlo live_range log capture replay torch_pickle; do
    # Seed each target's corpus with real fixtures.
    mkdir -p "corpus/$t"
    case $t in
        buffer_assignment) cp ../testdata/h200/xla/*/*-buffer-assignment.txt "corpus/$t/" ;;
        hlo) cp ../testdata/h200/xla/*/*jit_padf*after_optimizations.txt ../testdata/h200/seeds/*.hlo.txt "corpus/$t/" ;;
        live_range) cp ../testdata/h200/xla/*/*-live-range.txt "corpus/$t/" ;;
        log) cp ../testdata/h200/seeds/*.txt ../testdata/h200/bfc/*/*.log "corpus/$t/" ;;
        # The target's first byte picks raw (even) or re-framed (odd) input; the seed is a
        # real H200 capture's frames after its 16-byte preamble, as raw input (libFuzzer
        # reads its first -max_len bytes).
        capture) { printf '\0'; tail -c +17 ../testdata/h200-captures/jax0.11.2-platform-allocator.mwcap; } > "corpus/$t/h200-platform" ;;
        # memwatch replay's inputs: bfc_validate documents and an OOM log from the H200, and
        # a few JSON lines.
        replay) cp ../testdata/h200/bfc/h200-jax0.11.2/*.json ../testdata/h200/bfc/h200-jax0.11.2/oom-26x4GiB.log "corpus/$t/"
                printf '%s\n' '{"op":"alloc","id":1,"size":1048576,"tag":"w"}' '{"op":"alloc","id":2,"size":300}' '{"op":"free","id":1}' '{"op":"alloc","id":3,"size":4194304}' > "corpus/$t/lines.jsonl" ;;
        # Real PyTorch snapshots (H100), as raw input (first byte 0: the bytes as they are).
        torch_pickle) for f in ../testdata/torch-snapshots/*.pickle; do
                          { printf '\0'; cat "$f"; } > "corpus/$t/$(basename "$f")"
                      done ;;
    esac
    echo "== fuzz $t for ${SECS}s"
    cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$SECS" -max_len=65536
done
