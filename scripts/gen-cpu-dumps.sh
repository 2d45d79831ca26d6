#!/usr/bin/env bash
# Generates XLA CPU dumps with jax[cpu]==0.10.2 for the Rust tests (testdata/cpu-jax0.10.2/).
# Idempotent: the venv at .venv-jax/ (git-ignored) is created once and reused.
#   scripts/gen-cpu-dumps.sh [OUT_DIR]     (default: testdata/cpu-jax0.10.2)
set -euo pipefail
cd "$(dirname "$0")/.."
JAX_VERSION=0.10.2
VENV=.venv-jax
OUT=${1:-testdata/cpu-jax0.10.2}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import jax, sys; sys.exit(jax.__version__ != '$JAX_VERSION')" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet "jax[cpu]==$JAX_VERSION"
fi
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
"$VENV/bin/python" tests/python/gen_dumps.py "$OUT.tmp"
# keep only the text dumps and the recorded memory_analysis() (no LLVM IR, objects)
find "$OUT.tmp" -type f ! -name "*.txt" ! -name "*.json" -delete
find "$OUT.tmp" -mindepth 1 -type d -empty -delete
# keep the provenance note
[ -f "$OUT/README.md" ] && cp "$OUT/README.md" "$OUT.tmp/"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "wrote $(ls "$OUT" | wc -l) files to $OUT"
