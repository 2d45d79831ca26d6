#!/usr/bin/env bash
# Builds memwatch's container images with Debian's Docker engine, from Debian packages
# only (no image registry is used):
#   memwatch/base:bookworm   Debian 12 made with mmdebstrap (essential packages, user
#                            memwatch uid/gid 10001), imported into the engine
#   memwatch/daemon          `memwatch serve`
#   memwatch/agent-cuda      `memwatch agent` for NVIDIA nodes (no CUDA inside: the NVIDIA
#                            container runtime mounts the driver, NVML is loaded at run time)
#   memwatch/agent-rocm      `memwatch agent` + ROCm SMI 5.2 from Debian (librocm-smi64-1)
# The binaries come from this work tree (cargo build, a no-op when target/ is fresh);
# no Rust toolchain image can be pulled here and Debian's rustc is too old for the workspace.
#
# Usage: bash scripts/build-images.sh [--profile release|debug] [--rebuild-base]
#   --profile release   (default) target/release, built if needed
#   --profile debug     target/debug as `cargo test` leaves it (what CI's container test
#                       uses: a release build costs minutes there; see docker/README.md)
#   --rebuild-base      make the Debian base again (security updates) even if it exists
# Idempotent: the base is made once per recipe (label memwatch.base-recipe), images are
# rebuilt from the engine's layer cache. Needs root when no Docker engine is running (it
# then starts Debian's dockerd in the background; see docker/engine.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
rebuild_base=0
while (($#)); do
  case $1 in
    --profile)
      profile=${2:-}
      shift 2 || true
      ;;
    --rebuild-base)
      rebuild_base=1
      shift
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "build-images: unknown argument '$1' (see --help)" >&2
      exit 2
      ;;
  esac
done
case $profile in
  release | debug) ;;
  *)
    echo "build-images: --profile must be release or debug, not '$profile'" >&2
    exit 2
    ;;
esac

# shellcheck source=docker/engine.sh
source docker/engine.sh
die() {
  echo "build-images: $*" >&2
  exit 2
}
mw_engine_packages || die "$MW_ENGINE_WHY"
mw_engine_up || die "$MW_ENGINE_WHY"

BASE=memwatch/base:bookworm
UID_GID=10001
target=${CARGO_TARGET_DIR:-target}
work=$target/docker
mkdir -p "$work"

# -- 1. The Debian base and the extra packages of the images, from one package snapshot --
# The extra .debs are downloaded by the same apt run that made the base (so their
# dependencies match it exactly) and kept beside it in target/docker/debs/.
EXTRA_DAEMON=(fonts-dejavu-core)  # chart text in the dashboard's PNG exports
EXTRA_ROCM=(librocm-smi64-1)      # ROCm SMI 5.2, loaded by the agent at run time
base_recipe() {
  declare -f make_base
  echo "${EXTRA_DAEMON[*]} / ${EXTRA_ROCM[*]} / $UID_GID"
}
# (Single quotes: $1 and $MMDEBSTRAP_APT_CONFIG are the hooks' own, set by mmdebstrap.)
# shellcheck disable=SC2016
make_base() {
  local tar=$1 debs=$2 log=$3
  local dl='APT_CONFIG=$MMDEBSTRAP_APT_CONFIG apt-get -qq --yes --no-install-recommends --download-only install'
  local arch='$1/var/cache/apt/archives'
  mmdebstrap --variant=essential \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook="echo 'memwatch:x:$UID_GID:$UID_GID:memwatch:/var/lib/memwatch:/usr/sbin/nologin' >> \"\$1/etc/passwd\"" \
    --customize-hook="echo 'memwatch:x:$UID_GID:' >> \"\$1/etc/group\"" \
    --customize-hook="install -d -o $UID_GID -g $UID_GID -m 0750 \"\$1/var/lib/memwatch\"" \
    --skip=cleanup/run \
    --customize-hook='find "$1/run" -mindepth 1 -maxdepth 1 -exec rm -rf {} +' \
    --customize-hook="install -d -o $UID_GID -g $UID_GID -m 0755 \"\$1/run/memwatch\"" \
    --customize-hook="rm -f $arch/*.deb && $dl ${EXTRA_DAEMON[*]} && mkdir -p '$debs/daemon' && mv $arch/*.deb '$debs/daemon/'" \
    --customize-hook="rm -f $arch/*.deb && $dl ${EXTRA_ROCM[*]} && mkdir -p '$debs/rocm' && mv $arch/*.deb '$debs/rocm/'" \
    bookworm "$tar" </dev/null >"$log" 2>&1
}
recipe=$(base_recipe | sha256sum | cut -c1-16)
have=$(docker image inspect -f '{{index .Config.Labels "memwatch.base-recipe"}}' "$BASE" 2>/dev/null || true)
if [[ $rebuild_base == 1 || $have != "$recipe" || ! -d $work/debs/daemon || ! -d $work/debs/rocm ]]; then
  echo "== base image $BASE (mmdebstrap, Debian packages)"
  t0=$SECONDS
  rm -rf "$work/debs" "$work/base.tar"
  make_base "$work/base.tar" "$(realpath -m "$work/debs")" "$work/mmdebstrap.log" || {
    tail -n 20 "$work/mmdebstrap.log" >&2
    die "mmdebstrap failed (it needs Debian's package mirror; log: $work/mmdebstrap.log)"
  }
  docker import --change "LABEL memwatch.base-recipe=$recipe" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$work/base.tar" "$BASE" >/dev/null
  rm -f "$work/base.tar"
  echo "   made in $((SECONDS - t0)) s"
else
  echo "== base image $BASE: up to date (recipe $recipe)"
fi

# -- 2. The binaries of this work tree --
echo "== memwatch + shim, $profile build"
cargo_args=(build --locked -p memwatch -p memwatch-preload)
[[ $profile == release ]] && cargo_args+=(--release)
# (memwatch-kernels' notes about HIP targets this hipcc lacks are left out.)
cargo "${cargo_args[@]}" 2> >(grep -v '^warning: memwatch-kernels' >&2) || die "cargo ${cargo_args[*]} failed"
bin=$target/$profile

# -- 3. The build context: only what the images hold (the work tree is gigabytes) --
ctx=$work/context
rm -rf "$ctx"
mkdir -p "$ctx/bin" "$ctx/docker" "$ctx/debs"
# Debug sections out (symbols stay, so panics still name functions): 3-4x smaller.
objcopy --strip-debug "$bin/memwatch" "$ctx/bin/memwatch"
objcopy --strip-debug "$bin/libmemwatch_preload.so" "$ctx/bin/libmemwatch_preload.so"
cp docker/daemon-health.sh docker/agent-entrypoint.sh "$ctx/docker/"
cp -r "$work/debs/daemon" "$work/debs/rocm" "$ctx/debs/"
revision=$(git describe --always --dirty 2>/dev/null || echo unknown)

# -- 4. The images --
for image in daemon agent-cuda agent-rocm; do
  echo "== memwatch/$image"
  t0=$SECONDS
  docker build -f "docker/Dockerfile.$image" -t "memwatch/$image" \
    --build-arg "BASE=$BASE" \
    --label "memwatch.profile=$profile" --label "memwatch.revision=$revision" \
    "$ctx" >"$work/build-$image.log" 2>&1 || {
    tail -n 30 "$work/build-$image.log" >&2
    die "docker build of memwatch/$image failed (log: $work/build-$image.log)"
  }
  echo "   built in $((SECONDS - t0)) s"
done

echo "== sizes"
for image in base:bookworm daemon agent-cuda agent-rocm; do
  printf '  %-22s %6s MB\n' "memwatch/$image" \
    "$(($(docker image inspect -f '{{.Size}}' "memwatch/$image") / 1000000))"
done
echo "(profile $profile, revision $revision; start with: see docker/README.md)"
