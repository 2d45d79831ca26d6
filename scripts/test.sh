#!/usr/bin/env bash
# The test suite: formatting, lints, then every test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
