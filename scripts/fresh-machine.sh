#!/usr/bin/env bash
# The README's set-up on a fresh Debian 12 machine: a new container of a `debian:bookworm`
# made here with mmdebstrap (minbase: what a minimal Debian install has; no image
# registry, Debian's Docker engine as in docker/README.md), holding only the README's one
# prerequisite, the host's Rust toolchain (rustup's home, mounted read-only; a fresh,
# empty CARGO_HOME), and a clean clone of COMMIT. It runs the README's two commands there
# with CI=true, as CI does:
#   bash scripts/quickstart.sh
#   bash scripts/test.sh
# and prints each command's exit status and wall time and the suite's closing line
# ("N passed, N failed"). Exit 0 when both passed, 1 when either failed, 2 when the
# container could not be set up.
#
#   bash scripts/fresh-machine.sh [COMMIT] [--rebuild-base] [--keep]
#     COMMIT          what to clone (default HEAD of this checkout; uncommitted changes
#                     are not part of a clone)
#     --rebuild-base  make the Debian base again (security updates)
#     --keep          leave the container (stopped) for inspection
#
# The container reaches the package registries (Debian, crates.io, PyPI) through the
# host's network (--network host: the engine has no bridge, see docker/engine.sh) and trusts
# the certificate authorities the host adds to Debian's (/usr/local/share/ca-certificates).
# It has what root has on a machine for the tests that trace processes (ptrace, gdb:
# SYS_PTRACE, no seccomp filter) and an init that reaps orphans, as a machine's pid 1 does;
# it gets no other privilege, so the Docker engine it starts cannot unpack images and the
# container test says SKIPPED with the reason (that test runs where an engine can). The
# full log goes to stdout; the summary is its last lines.
set -euo pipefail
cd "$(dirname "$0")/.."

commit=HEAD
rebuild_base=0
keep=0
while (($#)); do
  case $1 in
    --rebuild-base) rebuild_base=1 ;;
    --keep) keep=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "fresh-machine: unknown option '$1' (see --help)" >&2
      exit 2
      ;;
    *) commit=$1 ;;
  esac
  shift
done
die() {
  echo "fresh-machine: $*" >&2
  exit 2
}
sha=$(git rev-parse --verify -q "$commit^{commit}") || die "'$commit' is not a commit of this repository"

# -- The Rust toolchain of the host: rustup's home, read-only --
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
rustup_bin=$(command -v rustup) || die "rustup is not on PATH: the README's prerequisite (https://rustup.rs) is needed here too"
[[ -d $rustup_home/toolchains ]] || die "no rustup toolchains in $rustup_home (set RUSTUP_HOME)"
toolchain=$(rustup show active-toolchain | awk '{print $1}')
rust_version=$(rustc --version)

# -- The engine and the Debian base --
# shellcheck source=docker/engine.sh
source docker/engine.sh
mw_engine_packages || die "$MW_ENGINE_WHY"
mw_engine_up || die "$MW_ENGINE_WHY"
BASE=$MW_FRESH_BASE
work=$(mktemp -d /tmp/memwatch-fresh.XXXXXX)
cid=""
cleanup() {
  local status=$?
  if [[ -n $cid && $keep == 0 ]]; then docker rm -f "$cid" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
rebuild=()
[[ $rebuild_base == 1 ]] && rebuild=(--rebuild)
mw_fresh_base "${rebuild[@]}" || die "$MW_ENGINE_WHY"

# -- A clean clone of COMMIT (made here: the fresh machine has no git until a script
# installs it, and a checkout is where the README starts) --
git clone -q --no-checkout "$(git rev-parse --path-format=absolute --git-common-dir)" "$work/memwatch"
git -C "$work/memwatch" checkout -q --detach "$sha"
git -C "$work/memwatch" remote remove origin

# -- CARGO_HOME: empty and writable, with rustup's proxies as rustup-init leaves them --
mkdir -p "$work/cargo/bin"
cp "$rustup_bin" "$work/cargo/bin/rustup"
for p in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver rust-gdb; do
  ln "$work/cargo/bin/rustup" "$work/cargo/bin/$p"
done

# What runs inside: the README's two commands, timed, and the suite's closing line.
inner='
set -uo pipefail
cd /root/memwatch
clock() { local s=$1; printf "%d min %02d s" $((s / 60)) $((s % 60)); }
t=$SECONDS
bash scripts/quickstart.sh
qs=$?
qs_time=$((SECONDS - t))
echo "== fresh-machine: quickstart.sh exited $qs after $(clock "$qs_time")"
t=$SECONDS
bash scripts/test.sh 2>&1 | tee /root/test.log
ts=${PIPESTATUS[0]}
ts_time=$((SECONDS - t))
closing=$(grep -E "^[0-9]+ passed, [0-9]+ failed$" /root/test.log | tail -n 1)
rust=$(awk "/^test result:/ { p += \$4; f += \$6 } END { printf \"%d passed, %d failed\", p, f }" /root/test.log)
failed=$(grep -E "^test .* FAILED$|^    [a-z_0-9:]+$" /root/test.log | sort -u | head -n 40)
echo
echo "== fresh-machine: summary"
echo "machine:        $(nproc) cores, $(awk "/MemTotal/ {printf \"%.0f GiB\", \$2 / 1048576}" /proc/meminfo), $(. /etc/os-release; echo "$PRETTY_NAME"), kernel $(uname -r)"
echo "quickstart.sh:  exit $qs, $(clock "$qs_time")"
echo "test.sh:        exit $ts, $(clock "$ts_time")"
echo "closing line:   ${closing:-(none: test.sh stopped before it; the Rust tests it ran: $rust)}"
[[ -z $failed || $ts == 0 ]] || printf "failed tests:\n%s\n" "$failed"
echo "last lines of test.sh:"
tail -n 8 /root/test.log | sed "s/^/  /"
[[ $qs == 0 && $ts == 0 ]]
'

# The network's own certificate authorities (a network that inspects TLS has them in the
# host's /usr/local/share/ca-certificates; every machine on it needs them), added to the
# system store when install-deps.sh installs ca-certificates, and the variables that point
# programs (pip, requests, curl) at that store.
net=()
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  net+=(-v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro)
fi
for v in SSL_CERT_FILE SSL_CERT_DIR PIP_CERT REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO \
  http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -n ${!v:-} ]] && net+=(-e "$v=${!v}")
done

echo "== fresh-machine: commit $sha, toolchain $toolchain ($rust_version), base $BASE"
cid=$(docker create --init --network host --shm-size 2g "${net[@]}" \
  --cap-add SYS_PTRACE --security-opt seccomp=unconfined \
  -v "$rustup_home:/opt/rustup:ro" -e RUSTUP_HOME=/opt/rustup -e RUSTUP_TOOLCHAIN="$toolchain" \
  -e CARGO_HOME=/root/.cargo -e PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  -e CI=true -e HOME=/root -e LANG=C.UTF-8 -w /root \
  "$BASE" bash -c "$inner")
docker cp -q "$work/memwatch" "$cid:/root/memwatch"
docker cp -q "$work/cargo" "$cid:/root/.cargo"
[[ $keep == 1 ]] && echo "== fresh-machine: container $cid (kept: --keep)"
status=0
docker start -a "$cid" || status=$?
echo "== fresh-machine: commit $sha on $BASE: $([[ $status == 0 ]] && echo passed || echo FAILED)"
((status == 0)) || exit 1
