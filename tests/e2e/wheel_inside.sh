#!/usr/bin/env bash
# What tests/e2e/wheel.sh runs inside a fresh Debian 12 container (or, where no container
# can run, on the host): a new venv, the wheel installed from the file alone, then the
# quick start's capture and diagnosis and the other entry points, each output kept in OUT
# for wheel.sh to check and to compare with the source build's.
#   bash wheel_inside.sh IN OUT
#     IN   the wheel (memwatch-*.whl), demo/ (the simulated runtime, mwtest, attach_loop),
#          inc/ (the H200 incident: run.log and its XLA dump), memory.json (memwatch-jax)
#     OUT  an empty folder: the outputs; commands run there, on relative paths
# The venv's memwatch is called by path (no activation) and finds its shim where the wheel
# put it: neither MEMWATCH_PRELOAD nor --shim is given.
set -euo pipefail
IN=$(cd "$1" && pwd)
OUT=$(cd "$2" && pwd)
unset MEMWATCH_PRELOAD
say() { echo "wheel-inside: $*"; }
fail() {
  echo "wheel-inside: FAIL: $*"
  exit 1
}

venv=$(mktemp -d)/v
python3 -m venv "$venv"
wheels=("$IN"/memwatch-*.whl)
t0=$(date +%s.%N)
"$venv/bin/pip" install -q --no-index --disable-pip-version-check "${wheels[0]}" ||
  fail "pip install --no-index ${wheels[0]} failed"
t1=$(date +%s.%N)
say "pip install --no-index $(basename "${wheels[0]}"): $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s, Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())')"
mw=$venv/bin/memwatch

cd "$OUT"
"$mw" --version >version.txt
cp -r "$IN/demo" "$IN/inc" "$IN/memory.json" .

# -- 1. The quick start's capture: a launcher with 3 workers over the simulated runtime --
# (mwtest dlopens ./libamdhip64.so, ./libcuda.so ... from its working directory.)
say "memwatch run --db demo/memwatch.db -- (threads on 8 devices, a fork, OOMs)"
(cd demo && "$mw" run --db memwatch.db --out ../demo.mwcap --tag job=quickstart -- \
  sh -c "./mwtest dlsym threads 40 & ./mwtest dlsym fork & ./mwtest proc basic; wait" \
  >program.out 2>../run.stderr) || fail "memwatch run exited $?: $(tail -n 5 run.stderr)"
"$mw" report demo.mwcap --top 3 >report.txt
"$mw" report demo.mwcap --json >report.json
"$mw" diagnose demo.mwcap --json >diagnose.json

# -- 2. The quick start's diagnosis: a real RESOURCE_EXHAUSTED on an H200, through
# `python -m memwatch` (the same executable) --
say "python -m memwatch log inc/run.log --xla-dump inc"
"$venv/bin/python" -m memwatch log inc/run.log --xla-dump inc --mem-fraction 0.025 >log.txt
"$venv/bin/python" -m memwatch diagnose inc/run.log --xla-dump inc --json >diagnose-h200.json
# Bad input through `python -m`: exit 2, one line naming the file.
set +e
"$venv/bin/python" -m memwatch report no-such.mwcap >/dev/null 2>bad-input.txt
echo $? >bad-input.status
set -e

# -- 3. gate: a baseline written from the capture and memwatch-jax's file, then checked --
"$mw" gate --baseline baseline.toml --capture demo.mwcap --memory-analysis memory.json --update >gate-update.txt
"$mw" gate --baseline baseline.toml --capture demo.mwcap --memory-analysis memory.json --json >gate.json

# -- 4. attach: a running program (linked to the simulated runtime), the shim injected
# with ptrace (tried again while the target is caught outside a system call) --
say "memwatch attach (ptrace) to a running program"
demo/attach_loop 600 10 direct >attach-target.out &
target=$!
for _ in $(seq 100); do
  [[ -s attach-target.out ]] && break
  sleep 0.05
done
for try in 1 2 3 4 5; do
  if "$mw" attach "$target" --method ptrace --duration 600ms --json --out attach.mwcap >attach.json 2>attach.stderr; then
    break
  fi
  grep -q "was running its own code" attach.stderr && [[ $try != 5 ]] || fail "memwatch attach: $(tail -n 3 attach.stderr)"
  sleep 0.05
done
set +e
wait "$target"
echo $? >attach-target.status
set -e
"$mw" report attach.mwcap --json >attach-report.json

# -- 5. serve: the store of step 1 behind the API --
say "memwatch serve --db demo/memwatch.db"
"$mw" serve --db demo/memwatch.db --listen 127.0.0.1:17373 --ingest 127.0.0.1:17374 >serve.log 2>&1 &
server=$!
"$venv/bin/python" - <<'EOF' || {
import time, urllib.request
for _ in range(150):
    try:
        body = urllib.request.urlopen("http://127.0.0.1:17373/api/runs", timeout=2).read()
        open("runs.json", "wb").write(body)
        break
    except OSError:
        time.sleep(0.2)
else:
    raise SystemExit("no answer from /api/runs")
EOF
  kill "$server"
  fail "memwatch serve did not answer: $(tail -n 5 serve.log)"
}
kill "$server"
wait "$server" || true

# -- 6. The Python modules --
"$venv/bin/python" - >python.txt <<'EOF'
import os, memwatch, memwatch_jax
exe = memwatch.binary()
print("binary", os.path.relpath(exe, os.path.dirname(os.path.dirname(exe))))
print("memwatch_jax", memwatch_jax.FORMAT, memwatch_jax.VERSION, ",".join(memwatch_jax.__all__))
EOF
say "done: $(wc -l <report.txt) lines of report, $(wc -c <runs.json) bytes from /api/runs"
