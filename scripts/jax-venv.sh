#!/usr/bin/env bash
# Creates (once) the Python virtual environment `.venv-jax/` at the repository root with
# `jax[cpu]==0.10.2`, the JAX version the checked-in test dumps were generated with, plus
# the repository's own `memwatch-jax` helper (installed editable from python/memwatch-jax).
# Idempotent: when the venv already has the pinned JAX, nothing touches the network.
# Prints the venv's python path on its last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MEMWATCH_JAX_VENV:-.venv-jax}"
JAX_PIN="0.10.2"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "jax-venv: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import jax, sys; sys.exit(0 if jax.__version__ == '$JAX_PIN' else 1)" 2>/dev/null; then
  echo "jax-venv: installing jax[cpu]==$JAX_PIN into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q "jax[cpu]==$JAX_PIN" >&2
fi
if ! "$VENV/bin/python" -c "import memwatch_jax" 2>/dev/null; then
  echo "jax-venv: installing python/memwatch-jax (editable) into $VENV" >&2
  "$VENV/bin/python" -m pip install -q -e python/memwatch-jax >&2
fi
echo "$VENV/bin/python"
