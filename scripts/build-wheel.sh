#!/usr/bin/env bash
# Builds the `memwatch` wheel (python/memwatch/pyproject.toml) with maturin:
#   - the `memwatch` binary (cli/), stripped, installed as the environment's bin/memwatch,
#   - the shim libmemwatch_preload.so, stripped, as a data file installed to
#     <prefix>/lib/memwatch/ (where `memwatch` looks: ../lib/memwatch of its own folder),
#   - the Python modules `memwatch` (`python -m memwatch`) and `memwatch_jax`
#     (copied from python/memwatch-jax/src/memwatch_jax at each build).
# Then it checks the wheel: auditwheel's report (saved beside the wheel as
# WHEEL.auditwheel.txt; the platform tag auditwheel finds must be the wheel's own), the
# libraries each ELF file needs, its size (the release wheel must be under 40 MB), and
# installs it into a new venv with `pip install --no-index` (nothing fetched) to print
# the install time and `memwatch --version` from there.
#
#   bash scripts/build-wheel.sh [--profile release|debug] [--out DIR]
#     --profile release  (default) cargo's release profile (target/release, reused when
#                        fresh): the wheel to publish, into dist/
#                        (maturin compiles the cli crate once more with its strip flag, ~2
#                        min here; target/PROFILE/memwatch is then that stripped binary until
#                        the next cargo build of it, which compiles the crate back)
#     --profile debug    the dev profile `cargo test` leaves in target/debug (the suite's
#                        wheel test: a release build costs 20-50 min on 2 cores), into
#                        target/wheel/debug/; larger, no size limit
#     --out DIR          where the wheel goes instead
# Prints the wheel's path on its last line. maturin and auditwheel come from PyPI
# (pinned, installed once into .venv-wheel/). Exit 0: built and checked; 1: a check
# failed; 2: bad usage or the build failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

profile=release
out=""
while (($#)); do
  case $1 in
    --profile)
      profile=${2:-}
      shift 2 || true
      ;;
    --out)
      out=${2:-}
      shift 2 || true
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "build-wheel: unknown argument '$1' (see --help)" >&2
      exit 2
      ;;
  esac
done
case $profile in
  release)
    cargo_profile=(--release)
    dir=release
    out=${out:-$ROOT/dist}
    ;;
  debug)
    cargo_profile=()
    dir=debug
    out=${out:-$TARGET/wheel/debug}
    ;;
  *)
    echo "build-wheel: --profile must be release or debug, not '$profile'" >&2
    exit 2
    ;;
esac
die() {
  echo "build-wheel: $*" >&2
  exit 2
}
fail() {
  echo "build-wheel: FAIL: $*" >&2
  exit 1
}
# The limit the issue sets for a release wheel (bytes: 40 MB).
MAX_BYTES=40000000

# -- The tools (PyPI, pinned) --
VENV=$ROOT/.venv-wheel
MATURIN_PIN=1.16.0
AUDITWHEEL_PIN=6.8.2
if ! "$VENV/bin/maturin" --version 2>/dev/null | grep -qx "maturin $MATURIN_PIN" ||
  ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('auditwheel') != '$AUDITWHEEL_PIN')" 2>/dev/null; then
  echo "build-wheel: installing maturin==$MATURIN_PIN auditwheel==$AUDITWHEEL_PIN into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "maturin==$MATURIN_PIN" "auditwheel==$AUDITWHEEL_PIN"
fi

# -- The shim, built and stripped into the staging folder maturin reads --
# (maturin builds one crate, the binary; the shim is a second one.) `--strip-unneeded`
# keeps the dynamic symbol table the shim's interposition needs.
proj=$ROOT/python/memwatch
stage=$proj/build
t0=$SECONDS
echo "build-wheel: cargo build ${cargo_profile[*]} -p memwatch-preload"
nice -n 10 cargo build -q --locked "${cargo_profile[@]}" -p memwatch-preload || die "the shim did not build"
rm -rf "$stage"
mkdir -p "$stage/wheel-data/data/lib/memwatch" "$stage/python"
strip --strip-unneeded -o "$stage/wheel-data/data/lib/memwatch/libmemwatch_preload.so" \
  "$TARGET/$dir/libmemwatch_preload.so"
# The Python modules: maturin takes one source folder and follows no symbolic link.
cp -r "$proj/src/memwatch" "$ROOT/python/memwatch-jax/src/memwatch_jax" "$stage/python/"
find "$stage/python" -name __pycache__ -prune -exec rm -rf {} +

# -- The wheel --
mkdir -p "$out"
rm -f "$out"/memwatch-*.whl "$out"/memwatch-*.whl.auditwheel.txt
echo "build-wheel: maturin build (profile $profile) into $out"
maturin_profile=(--release)
[[ $profile == debug ]] && maturin_profile=(--profile dev)
(cd "$proj" && nice -n 10 "$VENV/bin/maturin" build --locked "${maturin_profile[@]}" --out "$out") ||
  die "maturin build failed"
wheels=("$out"/memwatch-*.whl)
[[ ${#wheels[@]} == 1 && -f ${wheels[0]} ]] || die "expected one wheel in $out, found: ${wheels[*]}"
wheel=${wheels[0]}
build_s=$((SECONDS - t0))

# -- What is in it --
"$VENV/bin/python" - "$wheel" <<'EOF' || exit 1
import sys, zipfile
wheel = sys.argv[1]
names = zipfile.ZipFile(wheel).namelist()
version = wheel.rsplit("/", 1)[-1].split("-")[1]
data = f"memwatch-{version}.data"
need = [
    f"{data}/scripts/memwatch",
    f"{data}/data/lib/memwatch/libmemwatch_preload.so",
    "memwatch/__init__.py",
    "memwatch/__main__.py",
    "memwatch_jax/__init__.py",
]
missing = [n for n in need if n not in names]
if missing:
    sys.exit(f"build-wheel: FAIL: {wheel} lacks {', '.join(missing)}")
for n in need:
    print(f"  {zipfile.ZipFile(wheel).getinfo(n).file_size:>10} B  {n}")
EOF

# -- auditwheel: the platform tag it finds must be the wheel's --
report=$wheel.auditwheel.txt
"$VENV/bin/auditwheel" show "$wheel" >"$report" 2>&1 || {
  cat "$report" >&2
  fail "auditwheel show failed"
}
echo "build-wheel: auditwheel show $(basename "$wheel"):"
sed 's/^/  /' "$report"
tag=$(basename "$wheel" .whl | awk -F- '{print $NF}')
tr -s ' \n' ' ' <"$report" | grep -q "consistent with the following platform tag: \"$tag\"" ||
  fail "auditwheel does not find the wheel consistent with its own tag $tag (report: $report)"

# -- The libraries its ELF files need: glibc alone for the shim (it links GCC's unwinder
# statically, agents/preload/build.rs), glibc and GCC's runtime for the binary --
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
"$VENV/bin/python" -m zipfile -e "$wheel" "$unpacked"
for f in "$unpacked"/memwatch-*.data/scripts/memwatch "$unpacked"/memwatch-*.data/data/lib/memwatch/libmemwatch_preload.so; do
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  glibc=$(readelf -V "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
  echo "build-wheel: $(basename "$f"): $(stat -c %s "$f") B, needs ${needed}(newest symbol version $glibc)"
  for lib in $needed; do
    case $lib in
      libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | ld-linux-x86-64.so.2) ;;
      libgcc_s.so.1) [[ $f != *.so ]] || fail "the shim needs $lib: it must need glibc alone (agents/preload/build.rs)" ;;
      *) fail "$(basename "$f") needs $lib: not part of glibc or GCC's runtime" ;;
    esac
  done
done

# -- Size --
bytes=$(stat -c %s "$wheel")
printf 'build-wheel: wheel %s: %d bytes (%.1f MB), built in %d s (profile %s)\n' \
  "$(basename "$wheel")" "$bytes" "$(echo "$bytes" | awk '{print $1 / 1e6}')" "$build_s" "$profile"
if [[ $profile == release ]] && ((bytes >= MAX_BYTES)); then
  fail "the wheel is $bytes bytes, over the limit of $MAX_BYTES"
fi

# -- Install time, into a new venv, from the wheel alone --
venv=$unpacked/venv
python3 -m venv "$venv"
t1=$(date +%s.%N)
"$venv/bin/pip" install -q --no-index --disable-pip-version-check "$wheel" || fail "pip install --no-index $wheel failed"
t2=$(date +%s.%N)
version=$("$venv/bin/memwatch" --version) || fail "the installed memwatch does not run"
[[ -f $venv/lib/memwatch/libmemwatch_preload.so ]] || fail "the shim is not in $venv/lib/memwatch/"
printf 'build-wheel: pip install --no-index into a new venv: %.1f s (%s, Python %s); %s\n' \
  "$(echo "$t1 $t2" | awk '{print $2 - $1}')" "$(nproc) cores" \
  "$("$venv/bin/python" -c 'import platform; print(platform.python_version())')" "$version"
echo "$wheel"
