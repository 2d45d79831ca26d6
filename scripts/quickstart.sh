#!/usr/bin/env bash
# Builds memwatch and runs its main job on the bundled real data (no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --locked -p memwatch
./target/release/memwatch format-version
