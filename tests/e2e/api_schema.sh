#!/usr/bin/env bash
# The daemon's JSON API against its own OpenAPI document, with schemathesis (PyPI,
# pinned; installed once into .venv-schemathesis/). Starts `memwatch serve` with a token
# on loopback over a fresh SQLite database holding a real H200 capture and an OOM log,
# then lets schemathesis generate requests for every documented operation (fixed seed)
# and check every answer: no 5xx, status codes, content types and bodies as documented,
# bad input refused, the token enforced.
#
# Left out: positive_data_acceptance. The document cannot say that `to` must follow
# `from`, that an ingest body must be a wire stream, or every field of an XLA report, so
# that check reports those correct 400 answers (README of daemon/).
#
#   bash tests/e2e/api_schema.sh [MAX_EXAMPLES]     (default 40 per operation)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MAX=${1:-40}
VENV=.venv-schemathesis
PIN=4.32.5
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$PIN"; then
  echo "api_schema: installing schemathesis==$PIN into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "schemathesis==$PIN"
fi

cargo build -q -p memwatch --bin memwatch
MW=$TARGET/debug/memwatch
# shellcheck source=tests/e2e/serve_lib.sh
. tests/e2e/serve_lib.sh
DB=$WORK/api.db
"$MW" import testdata/h200-captures/jax0.11.2-platform-allocator.mwcap --db "$DB" >/dev/null
"$MW" import --log testdata/h200/bfc/h200-jax0.11.2/oom-26x4GiB.log --db "$DB" >/dev/null

PORT=$(port)
TOKEN=schema-check-token
start_server "$DB" "$PORT" "$TOKEN"

"$VENV/bin/schemathesis" run "http://127.0.0.1:$PORT/api/openapi.json" \
  --checks all --exclude-checks positive_data_acceptance \
  -H "Authorization: Bearer $TOKEN" \
  --max-examples "$MAX" --seed 20261122 --workers 1 --no-color \
  || { echo "api_schema: schemathesis found problems (daemon log: below)"; tail -20 "$WORK/serve.log"; exit 1; }
echo "api_schema: the API answers as its OpenAPI document says"
