#!/usr/bin/env bash
# Installs what memwatch's build and tests need on Debian 12, idempotently.
# Safe to run again: packages already present are skipped without touching the network.
set -euo pipefail

APT_PACKAGES=(
  build-essential pkg-config
  libamdhip64-dev librocm-smi-dev   # ROCm 5.2: the HIP path builds and runs over the real libamdhip64
  clang-19 lld-19                   # compile + link the HIP replay kernels for gfx90a, gfx942, gfx1151 (kernels/build.rs)
  llvm-19                           # llvm-readobj-19: the kernel tests read the code objects back
  gdb                               # attach via gdb
  sqlite3
  curl                              # quickstart: talks to the API it serves
  postgresql                        # daemon tests on PostgreSQL (scripts/start-test-postgres.sh)
  fonts-dejavu-core                 # chart text in the dashboard's PNG exports (resvg uses system fonts)
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
