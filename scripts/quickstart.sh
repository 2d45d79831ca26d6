#!/usr/bin/env bash
# memwatch's main job on its embedded default (SQLite), on any Debian machine, GPU or not:
#   1. capture a multi-process program under `memwatch run` into the embedded SQLite store
#      (no GPU here: the program runs over memwatch's simulated HIP/CUDA runtime, reached
#      through dlopen+dlsym exactly like XLA reaches libamdhip64 / libcuda),
#   2. diagnose a real out-of-memory failure recorded on an NVIDIA H200 (log + XLA dump),
#   3. explain a real XLA module's memory (H200 dump),
#   4. predict whether a real allocator trace fits on other devices (BFC model replay),
#   5. serve the dashboard and JSON API over the store (until Ctrl-C when run in a
#      terminal; a short self-check otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --build
cargo build --release --locked -p memwatch -p memwatch-preload
mw="$PWD/target/release/memwatch"
demo="$PWD/target/quickstart"
mkdir -p "$demo"
db="$demo/memwatch.db"

# The simulated GPU runtime (8 devices, 1 GiB each) and a test program that uses it.
t=agents/preload/tests
cc -O2 -shared -fPIC -o "$demo/libmemwatch_testrt.so" "$t/runtime/memwatch_testrt.c" \
  -Wl,--version-script="$t/runtime/memwatch_testrt.map" -lpthread
for n in libamdhip64.so libcuda.so libcudart.so; do ln -sf libmemwatch_testrt.so "$demo/$n"; done
cc -O2 -o "$demo/mwtest" "$t/c/mwtest.c" -ldl -lpthread

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. memwatch run --db $db -- (a launcher with 3 workers: threads on 8 devices, a fork, OOMs)"
rm -f "$db" "$db"-wal "$db"-shm
# (mwtest dlopens ./libamdhip64.so, ./libcuda.so ... from its working directory.)
(cd "$demo" && "$mw" run --db "$db" --out "$demo/demo.mwcap" --tag job=quickstart -- \
  sh -c "./mwtest dlsym threads 40 & ./mwtest dlsym fork & ./mwtest proc basic; wait" > demo-program.out) || true
"$mw" report "$demo/demo.mwcap" --top 3

inc=testdata/h200/incidents/h200-jax0.11.2-oom-temp
step "2. memwatch log: a real RESOURCE_EXHAUSTED on an H200 (JAX 0.11.2), joined to its XLA dump"
"$mw" log "$inc/run.log" --xla-dump "$inc" --mem-fraction 0.025

step "3. memwatch xla report: what makes up a real jitted train step's memory (H200 dump)"
"$mw" xla report testdata/h200/xla/h200-jax0.11.2-mlp --module jit_mlp --top 8

step "4. memwatch replay: a real H200 BFC allocator run through the model (it fails at the same step), then a real JAX capture on other devices"
"$mw" replay testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.json || true
jaxcap=testdata/h200-captures/jax0.11.2-platform-allocator.mwcap
"$mw" report "$jaxcap" --top 3
"$mw" replay "$jaxcap" --trace-device 0 --compare-devices mi300x,strix-halo,h100,h200 || true
"$mw" replay "$jaxcap" --trace-device 0 --capacity 600MiB --find-min-capacity || true

step "5. memwatch serve --db $db  (dashboard and JSON API on http://127.0.0.1:7373)"
if [ -t 1 ] && [ -z "${CI:-}" ]; then
  echo "Open http://127.0.0.1:7373 in a browser; Ctrl-C stops the server."
  exec "$mw" serve --db "$db"
fi
port=$((20000 + RANDOM % 20000))
"$mw" serve --db "$db" --listen "127.0.0.1:$port" --ingest "127.0.0.1:$((port + 1))" > "$demo/serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/api/runs" > "$demo/runs.json" 2>/dev/null && break; sleep 0.2; done
echo "GET /api/runs -> $(head -c 400 "$demo/runs.json")"
curl -sf "http://127.0.0.1:$port/" -o "$demo/overview.html" && echo "GET / -> dashboard overview page, $(wc -c < "$demo/overview.html") bytes"
echo "Run 'target/release/memwatch serve --db $db' and open http://127.0.0.1:7373 to browse."
