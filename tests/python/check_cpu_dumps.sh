#!/usr/bin/env bash
# Re-generates the CPU dumps with jax[cpu]==0.10.2 (venv .venv-jax/, created on first use)
# into a temp dir and checks that `memwatch`'s report equals the memory_analysis() recorded
# by JAX for every program (the same Rust test that runs on the checked-in copy in CI).
set -euo pipefail
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
bash scripts/gen-cpu-dumps.sh "$TMP/dumps"
MEMWATCH_CPU_DUMPS="$TMP/dumps" cargo test -q -p memwatch-analysis --test xla_fixtures cpu_jax
echo "fresh jax[cpu]==0.10.2 dumps match memory_analysis() for every recorded program"
