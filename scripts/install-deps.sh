#!/usr/bin/env bash
# Installs what memwatch's build and tests need on Debian 12, idempotently: every program
# the tests, scripts and build files call comes from here, from Debian's essential set or
# from the Rust toolchain (scripts/check-programs.py, run by test.sh, checks that).
# Safe to run again: packages already present are skipped without touching the network.
#
#   bash scripts/install-deps.sh            the build and the whole test suite (test.sh)
#   bash scripts/install-deps.sh --build    what the build and the quick start need
#   bash scripts/install-deps.sh --engine   the Docker engine only (docker/engine.sh)
#   bash scripts/install-deps.sh --list [--build|--engine]   print the packages, install nothing
set -euo pipefail

# The build and the quick start.
BUILD_PACKAGES=(
  build-essential pkg-config        # cc and the linker of every Rust build; the test programs in C
  ca-certificates                   # cargo's and curl's HTTPS (crates.io)
  libamdhip64-dev librocm-smi-dev   # ROCm 5.2: the HIP path builds and runs over the real libamdhip64
  clang-19 lld-19                   # compile + link the HIP replay kernels for gfx90a, gfx942, gfx1151 (kernels/build.rs)
  curl                              # quickstart: talks to the API it serves
  fonts-dejavu-core                 # chart text in the dashboard's PNG exports (resvg uses system fonts)
)
# The test suite (scripts/test.sh) on top of the build.
TEST_PACKAGES=(
  llvm-19                           # llvm-readobj-19: the kernel tests read the code objects back
  gdb                               # attach via gdb
  sqlite3
  postgresql                        # daemon tests on PostgreSQL (scripts/start-test-postgres.sh)
  procps                            # kill, ps, pgrep: tests signal and look for processes
  python3 python3-venv              # docs check, e2e helpers; venvs for jax[cpu] and schemathesis (PyPI)
  chromium                          # the dashboard in a headless browser (tests/e2e/dashboard.sh)
  git                               # scripts that list the tracked files (docs and programs checks)
  shfmt                             # parses the shell scripts for scripts/check-programs.py
  systemd                           # systemd-analyze verify of the agent's unit (tests/e2e/containers.sh)
)
# Debian's Docker engine and the tool that makes the images' base, without a registry: the
# container test and scripts/build-images.sh (docker/engine.sh installs this group alone).
ENGINE_PACKAGES=(docker.io docker-compose mmdebstrap)

list=0
if [[ ${1:-} == --list ]]; then
  list=1
  shift
fi
case ${1:-} in
  "") packages=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}" "${ENGINE_PACKAGES[@]}") ;;
  --build) packages=("${BUILD_PACKAGES[@]}") ;;
  --engine) packages=("${ENGINE_PACKAGES[@]}") ;;
  *)
    echo "install-deps: unknown argument '$1' (--build, --engine, --list or nothing)" >&2
    exit 2
    ;;
esac
if ((list)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
