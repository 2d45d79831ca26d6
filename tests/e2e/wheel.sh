#!/usr/bin/env bash
# The `memwatch` wheel end to end:
#   1. scripts/build-wheel.sh builds and checks it (auditwheel's tag, the libraries its ELF
#      files need, its size, a pip install --no-index). Profile: release when the work
#      tree has a release build, else debug, the build `cargo test` made (a release build
#      costs 20-50 min on CI's 2 cores; the two wheels differ only in the binary's
#      optimisation); MEMWATCH_WHEEL_PROFILE overrides.
#   2. In a fresh Debian 12 container (memwatch/fresh-debian:bookworm, the minimal install
#      scripts/fresh-machine.sh uses, plus Debian's python3-venv: image
#      memwatch/wheel-test:bookworm, made once) without network, tests/e2e/wheel_inside.sh
#      makes a venv, installs the wheel from the file alone and runs the quick start's
#      capture (`memwatch run --db` over the simulated runtime) and diagnosis (`python -m
#      memwatch log` of a real H200 OOM), report, diagnose, gate, attach (ptrace) and serve,
#      the shim found where the wheel put it. Where no container can run (no engine, or
#      inside a container without privileges) the same script runs on the host, in a venv,
#      and the test says so (MEMWATCH_REQUIRE_CONTAINERS=1 makes that a failure).
#   3. Every output of step 2 that depends only on its input equals the source build's
#      (target/PROFILE/memwatch) on the same files; the live ones (attach, serve) are
#      checked for what the programs did.
#   4. The wheel installs and runs (`python -m memwatch --version`, `import memwatch_jax`)
#      under every Python 3.9 or newer found here (python3.N on PATH, pyenv's versions).
#   5. `pip install --prefix P` (the layout of --user and system installs): P/bin/memwatch
#      finds the shim in P/lib/memwatch/.
# Exit 0: passed; 1: a check failed; 2: the wheel could not be built.
#   bash tests/e2e/wheel.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
T_START=$SECONDS
step() { echo "== wheel: $* ($((SECONDS - T_START)) s)"; }
say() { echo "wheel: $*"; }
FAILED=()
failed() {
  echo "wheel: FAIL: $*"
  FAILED+=("$*")
}

# -- 1. The wheel --
profile=${MEMWATCH_WHEEL_PROFILE:-}
if [[ -z $profile ]]; then
  profile=debug
  [[ -x $TARGET/release/memwatch && -f $TARGET/release/libmemwatch_preload.so ]] && profile=release
fi
step "scripts/build-wheel.sh --profile $profile"
WORK=$(mktemp -d /tmp/memwatch-wheel.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
bash scripts/build-wheel.sh --profile "$profile" --out "$WORK/in" | tee "$WORK/build.log" | sed 's/^/   /'
[[ ${PIPESTATUS[0]} == 0 ]] || exit 2
wheel=$(tail -n 1 "$WORK/build.log")
MW=$TARGET/$profile/memwatch

# -- The inputs: the simulated runtime and the programs (built here: the container has no
# compiler), the quick start's H200 incident, a memwatch-jax file --
IN=$WORK/in
demo=$IN/demo
mkdir -p "$demo"
t=agents/preload/tests
cc -O2 -shared -fPIC -o "$demo/libmemwatch_testrt.so" "$t/runtime/memwatch_testrt.c" \
  -Wl,--version-script="$t/runtime/memwatch_testrt.map" -lpthread
for n in libamdhip64.so libcuda.so libcudart.so; do ln -sf libmemwatch_testrt.so "$demo/$n"; done
cc -O2 -o "$demo/mwtest" "$t/c/mwtest.c" -ldl -lpthread
# attach_loop finds the runtime beside itself ($ORIGIN), wherever demo/ is copied.
cc -O1 -o "$demo/attach_loop" cli/tests/c/attach_loop.c -L"$demo" -lmemwatch_testrt -Wl,-rpath,'$ORIGIN'
cp -r testdata/h200/incidents/h200-jax0.11.2-oom-temp "$IN/inc"
cp testdata/gate-jax0.10.2/checkpoint/memory.json "$IN/memory.json"
OUT=$WORK/out
mkdir -p "$OUT"

# -- 2. A fresh container, or the host --
where=""
# shellcheck source=docker/engine.sh
source docker/engine.sh
IMAGE=memwatch/wheel-test:bookworm
container_why=""
engine_probe() {
  mw_engine_packages || return 1
  mw_engine_up || return 1
  # An engine that runs but cannot unpack an image (inside a container without
  # privileges: no mount namespaces) tells with a one-file image, before any base is made.
  local d p
  d=$(mktemp -d)
  : >"$d/probe"
  p=$(tar -C "$d" -c probe | docker import - memwatch-wheel-probe:latest 2>&1) || {
    rm -rf "$d"
    MW_ENGINE_WHY="the engine cannot unpack an image here: $p"
    return 1
  }
  rm -rf "$d"
  docker rmi memwatch-wheel-probe:latest >/dev/null 2>&1 || true
  mw_fresh_base || return 1
  p=$(docker run --rm --network none "$MW_FRESH_BASE" true 2>&1) || {
    MW_ENGINE_WHY="the engine cannot start a container here: $p"
    return 1
  }
}
engine_probe || container_why=$MW_ENGINE_WHY
if [[ -z $container_why ]]; then
  recipe="$(docker image inspect -f '{{.Id}}' "$MW_FRESH_BASE")+python3-venv"
  if [[ $(docker image inspect -f '{{index .Config.Labels "memwatch.wheel-recipe"}}' "$IMAGE" 2>/dev/null) != "$recipe" ]]; then
    step "making $IMAGE ($MW_FRESH_BASE + Debian's python3-venv)"
    proxy=()
    for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
      [[ -n ${!v:-} ]] && proxy+=(-e "$v=${!v}")
    done
    name=memwatch-wheel-image-$$
    docker run --name "$name" --network host "${proxy[@]}" "$MW_FRESH_BASE" sh -c \
      'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null && apt-get clean' ||
      {
        docker rm -f "$name" >/dev/null 2>&1
        echo "wheel: apt-get in the container failed (it needs Debian's mirror)"
        exit 2
      }
    docker commit --change "LABEL memwatch.wheel-recipe=$recipe" "$name" "$IMAGE" >/dev/null ||
      echo "wheel: docker commit of $IMAGE failed"
    docker rm "$name" >/dev/null
    [[ $(docker image inspect -f '{{index .Config.Labels "memwatch.wheel-recipe"}}' "$IMAGE" 2>/dev/null) == "$recipe" ]] || exit 2
  fi
  step "a fresh $IMAGE container, no network: venv, pip install --no-index, capture, diagnose, gate, attach, serve"
  where="a fresh container of $IMAGE (Debian $(docker run --rm --network none "$IMAGE" cat /etc/debian_version), no network)"
  set +e
  # Root inside (ptrace needs it there); what it writes is given back to the caller's uid.
  docker run --rm --init --network none --cap-add SYS_PTRACE --security-opt seccomp=unconfined \
    -v "$IN:/in:ro" -v "$OUT:/out" -v "$ROOT/tests/e2e/wheel_inside.sh:/wheel_inside.sh:ro" \
    -e OWNER="$(id -u):$(id -g)" "$IMAGE" \
    bash -c 'bash /wheel_inside.sh /in /out; s=$?; chown -R "$OWNER" /out; exit $s' | sed 's/^/   /'
  status=${PIPESTATUS[0]}
  set -e
else
  say "no container: $container_why; running wheel_inside.sh on the host instead"
  if [[ ${MEMWATCH_REQUIRE_CONTAINERS:-0} == 1 ]]; then
    echo "wheel: MEMWATCH_REQUIRE_CONTAINERS=1: no container is a failure"
    exit 1
  fi
  where="the host (no container: $container_why)"
  step "on the host: venv, pip install --no-index, capture, diagnose, gate, attach, serve"
  set +e
  bash tests/e2e/wheel_inside.sh "$IN" "$OUT" | sed 's/^/   /'
  status=${PIPESTATUS[0]}
  set -e
fi
mw_engine_down
((status == 0)) || failed "wheel_inside.sh exited $status in $where"

# -- 3. The outputs: what the programs did, and the same as the source build's --
step "checking the outputs against what the programs did and against $MW"
if ((status == 0)); then
  (
    cd "$OUT"
    "$MW" --version >version.source.txt
    "$MW" report demo.mwcap --top 3 >report.source.txt
    "$MW" report demo.mwcap --json >report.source.json
    "$MW" diagnose demo.mwcap --json >diagnose.source.json
    "$MW" log inc/run.log --xla-dump inc --mem-fraction 0.025 >log.source.txt
    "$MW" diagnose inc/run.log --xla-dump inc --json >diagnose-h200.source.json
    "$MW" gate --baseline baseline.source.toml --capture demo.mwcap --memory-analysis memory.json --update >gate-update.source.txt
    "$MW" gate --baseline baseline.toml --capture demo.mwcap --memory-analysis memory.json --json >gate.source.json
  ) || failed "the source build $MW failed on the wheel's outputs"
  for f in version.txt report.txt report.json diagnose.json log.txt diagnose-h200.json gate.json; do
    src=${f%.*}.source.${f##*.}
    if cmp -s "$OUT/$f" "$OUT/$src"; then
      say "$f: the same as the source build's ($(wc -c <"$OUT/$f") bytes)"
    else
      failed "$f differs from the source build's: $(diff "$OUT/$f" "$OUT/$src" | head -n 6 | tr '\n' ' ')"
    fi
  done
  cmp -s "$OUT/baseline.toml" "$OUT/baseline.source.toml" ||
    failed "the gate baseline written from the wheel differs from the source build's"
  python3 - "$OUT" <<'EOF' || failed "the outputs do not show what the programs did (above)"
import json, os, sys
out = sys.argv[1]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)
bad = []
def check(ok, what):
    print(f"wheel:   {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        bad.append(what)

# The capture: the launcher's three workers and the fork's child, each with its events.
r = load("report.json")
cmds = sorted(" ".join(p["command"]) for p in r["processes"])
check(cmds == ["./mwtest dlsym fork", "./mwtest dlsym fork", "./mwtest dlsym threads 40", "./mwtest proc basic"],
      f"capture: the 4 processes of the quick start's program ({cmds})")
threads = next(p for p in r["processes"] if p["command"][-1] == "40")
allocs = sorted((d["device"], d["alloc_count"], d["free_count"]) for d in threads["devices"])
check(allocs == [(d, 40, 40) for d in range(8)], f"capture: 40 allocations and frees on each of 8 devices ({allocs})")
check(all(p["exit_code"] == 0 for p in r["processes"]), "capture: every process exited 0")
check(r["failures_total"] > 0, f"capture: the refused allocations of `mwtest proc basic` ({r['failures_total']})")
d = load("diagnose.json")
check(len(d["verdicts"]) > 0, f"diagnose: a verdict on the capture ({[v['kind'] for v in d['verdicts']]})")
h = load("diagnose-h200.json")
check(h["failed"] and len(h["verdicts"]) > 0, f"diagnose: the H200 OOM ({[v['kind'] for v in h['verdicts']]})")
log = open(os.path.join(out, "log.txt")).read()
check("Device: NVIDIA H200" in log and "Out of memory #1 (inc/run.log:24)" in log,
      "python -m memwatch log: the H200 log's out-of-memory failure, at its line")
status = open(os.path.join(out, "bad-input.status")).read().strip()
msg = open(os.path.join(out, "bad-input.txt")).read()
check(status == "2" and "no-such.mwcap" in msg, f"python -m memwatch: bad input exits {status} naming the file")
g = load("gate.json")
check(isinstance(g, dict), "gate: a JSON report against the baseline it wrote")

# attach: the iterations made while attached (hipMalloc of 4096 + i bytes), the target's
# exit code unchanged (3).
a = load("attach.json")
t = a["targets"][0]
check(t["attached"] is True and t["detached"] == "stopped", f"attach: attached and detached ({t['attached']}, {t['detached']})")
ar = load("attach-report.json")
n = sum(dv["alloc_count"] for p in ar["processes"] for dv in p["devices"])
check(n > 0, f"attach: {n} allocations captured while attached")
check(open(os.path.join(out, "attach-target.status")).read().strip() == "3", "attach: the target's exit code unchanged (3)")

# serve: the run captured in step 1, as the capture has it.
runs = load("runs.json")["runs"]
events = [x["event_count"] for x in runs]
check(events == [r["events"]], f"serve: /api/runs lists the captured run, {events} events (capture: {r['events']})")
stored = sum(dv["alloc_count"] for x in runs for dv in x["devices"])
captured = sum(dv["alloc_count"] for p in r["processes"] for dv in p["devices"])
check(stored == captured, f"serve: its allocations per device add up to the capture's ({stored} = {captured})")

py = open(os.path.join(out, "python.txt")).read().split("\n")
check(py[0] == "binary bin/memwatch", f"python: memwatch.binary() is the venv's bin/memwatch ({py[0]})")
check(py[1].startswith("memwatch_jax memwatch-jax 1 "), f"python: memwatch_jax imports ({py[1]})")
sys.exit(1 if bad else 0)
EOF
fi

# -- 4. Every Python 3.9+ found here --
step "the Python versions found here"
pythons=()
for p in $(compgen -c python3. | sort -uV) "$HOME"/.pyenv/versions/*/bin/python3; do
  exe=$(command -v "$p" 2>/dev/null || true)
  [[ -n $exe && -x $exe ]] || continue
  v=$("$exe" -c 'import sys; print("%d.%d" % sys.version_info[:2]) if sys.version_info >= (3, 9) else None' 2>/dev/null) || continue
  [[ $v == 3.* ]] || continue
  [[ " ${pythons[*]} " == *" $v="* ]] && continue
  pythons+=("$v=$exe")
done
for pv in "${pythons[@]}"; do
  v=${pv%%=*}
  exe=${pv#*=}
  venv=$WORK/py$v
  if ! "$exe" -m venv "$venv" 2>/dev/null; then
    say "Python $v ($exe): no venv module, not tested"
    continue
  fi
  if "$venv/bin/pip" install -q --no-index --disable-pip-version-check "$wheel" &&
    out=$("$venv/bin/python" -m memwatch --version) &&
    "$venv/bin/python" -c "import memwatch_jax, memwatch; memwatch.binary()"; then
    say "Python $v ($exe): installed, python -m memwatch --version: $out, memwatch_jax imports"
  else
    failed "the wheel does not install or run under Python $v ($exe)"
  fi
done
((${#pythons[@]})) || failed "no Python 3.9 or newer found"

# -- 5. Outside a venv: `pip install --prefix P` puts the binary in P/bin and the shim in
# P/lib/memwatch (as for --user, ~/.local); memwatch run finds it there --
step "pip install --prefix: the binary finds its shim"
# (A venv's pip: Debian's python3 has none, and refuses installs outside a venv.)
python3 -m venv "$WORK/pip-venv" &&
  "$WORK/pip-venv/bin/pip" install -q --no-index --disable-pip-version-check --prefix "$WORK/prefix" "$wheel" ||
  failed "pip install --prefix failed"
if (cd "$WORK" && env -u MEMWATCH_PRELOAD "$WORK/prefix/bin/memwatch" run --out prefix.mwcap -- true >/dev/null 2>&1) &&
  [[ -s $WORK/prefix.mwcap && -f $WORK/prefix/lib/memwatch/libmemwatch_preload.so ]]; then
  say "--prefix: bin/memwatch run found lib/memwatch/libmemwatch_preload.so"
else
  failed "--prefix: bin/memwatch run did not find its shim in lib/memwatch/"
fi

if ((${#FAILED[@]})); then
  echo "wheel: FAILED (${#FAILED[@]}): ${FAILED[*]}"
  exit 1
fi
say "passed: $(basename "$wheel") ($profile) in $where; Python ${pythons[*]%%=*}"
