#!/usr/bin/env bash
# The test suite. CI runs exactly this (.ci/run); so can anyone on a fresh Debian 12
# (scripts/fresh-machine.sh shows it, in a new container):
#   that every program the suite calls is installed (scripts/check-programs.py),
#   formatting and lints, every Rust test (SQLite and PostgreSQL), no import cycle in the
#   shim (scripts/module_cycles.py), no Rust file over 800 lines
#   (scripts/check-file-size.py), the links, paths and commands the Markdown docs name
#   (scripts/check-doc-paths.py), the dashboard in a real headless Chromium, the
#   daemon's API against its OpenAPI document (schemathesis), the XLA dumps
#   re-generated with jax[cpu]==0.10.2 and the CI gate on them, a short fuzzing run of
#   every parser, the container images built, started and tested (skipped, saying
#   why, where no Docker engine can run), and the pip wheel built, installed from the
#   file alone in a fresh Debian 12 container (on the host where none can run) and
#   compared with the source build. GPU tests: tests/gpu/ (how to run them:
#   tests/gpu/results/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Every program the tests, scripts and build files call comes from install-deps.sh, Debian's
# essential set or the Rust toolchain.
python3 scripts/check-programs.py
# A one-shot CI build gains nothing from incremental state, which would double its disk use.
if [[ "${CI:-}" == true ]]; then export CARGO_INCREMENTAL=0; fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

export MEMWATCH_TEST_POSTGRES_URL="${MEMWATCH_TEST_POSTGRES_URL:-$(bash scripts/start-test-postgres.sh)}"
if [[ ! "$MEMWATCH_TEST_POSTGRES_URL" =~ ^postgres://[^[:space:]]+$ ]]; then
  echo "test.sh: MEMWATCH_TEST_POSTGRES_URL is not one postgres:// URL: [$MEMWATCH_TEST_POSTGRES_URL]" >&2
  exit 2
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# The daemon fault suites (daemon/tests/faults_*.rs) measure and kill the daemon users run,
# `memwatch serve` with its own allocator, built by this same cargo test before any test runs.
export MEMWATCH_SERVE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/memwatch"
cargo test --workspace --locked 2>&1 | tee "$log"

echo "== the shim's modules import no module above them (no import cycle)"; python3 scripts/module_cycles.py agents/preload/src
echo "== no Rust source file over 800 lines"; python3 scripts/check-file-size.py
echo "== docs: links, paths and memwatch commands they name"; python3 scripts/check-doc-paths.py
echo "== dashboard in headless Chromium"; bash tests/e2e/dashboard.sh
echo "== daemon API against its OpenAPI document (schemathesis)"; bash tests/e2e/api_schema.sh
echo "== CPU XLA dumps re-generated with jax[cpu]==0.10.2"; bash tests/python/check_cpu_dumps.sh
echo "== memwatch gate on a real JAX model"; bash scripts/gate-jax-test.sh
echo "== fuzzing every parser briefly"; bash scripts/fuzz-smoke.sh 5
echo "== container images: built, started, tested (docker/)"; bash tests/e2e/containers.sh
echo "== the pip wheel: built, installed in a fresh container, same as the source build"; bash tests/e2e/wheel.sh

# The closing line CI reads: every Rust test (the four suites above exit non-zero on any
# failure, so they never reach this line when they fail).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
