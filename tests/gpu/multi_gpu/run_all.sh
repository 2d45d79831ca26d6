#!/usr/bin/env bash
# Multi-GPU runs under memwatch on one host with N GPUs (default: every GPU nvidia-smi lists):
# one JAX worker per GPU (jax.distributed on localhost), torchrun + NCCL, a model split
# unevenly so that one GPU runs out while the others have room, and the node agent streaming
# to a daemon with NVML sampling every GPU. One folder per scenario under OUTDIR:
#   capture.mwcap run.json report.txt stdout.log stderr.log figures.rank<R>.json
#   events.rank<R>.jsonl nvsmi.csv nvsmi-apps.csv scenario.json [dump/rank<R>/]   (fleet: fleet.db, api-*.json)
#
#   bash tests/gpu/multi_gpu/run_all.sh MEMWATCH_BIN OUTDIR [SCENARIO ...]
#
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the others below), as the machines that
# lend several GPUs require. MG_CPU_TEST=1 dry-runs the programs on the CPU (gloo, JAX CPU)
# without memwatch's GPU figures, to check the scripts themselves.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mw="$(readlink -f "${1:?memwatch binary}")"
out="$(mkdir -p "${2:?output folder}" && cd "$2" && pwd)"
shift 2
py="${PYTHON:-python3}"
limit="${MG_TIMEOUT:-180}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
if [ "${MG_CPU_TEST:-}" = 1 ]; then n="${MG_GPUS:-2}"; else n="${MG_GPUS:-$(nvidia-smi -L | wc -l)}"; fi
torchrun=("$py" -m torch.distributed.run --standalone --nproc-per-node "$n")

# name | environment | command (run from the scenario folder)
SCENARIOS=(
  "jax_train||$py $here/jax_launch.py $n train 5 1024 8192"
  "jax_uneven|XLA_CLIENT_MEM_FRACTION=0.05|$py $here/jax_launch.py $n uneven 6,1 2048 8192 16384"
  "torch_ddp||${torchrun[*]} $here/torch_worker.py train 5 2048 4096"
  "torch_uneven||${torchrun[*]} $here/torch_worker.py uneven 6,1 4096 4096 0.05"
)
want=" $* "
status=0
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader || true
  nvidia-smi topo -m 2>/dev/null | head -8 || true
  "$py" - <<'PY' || true
import importlib.metadata as m
for p in ["jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt", "torch", "nvidia-nccl-cu13", "nvidia-nccl-cu12"]:
    try:
        print(p, m.version(p))
    except Exception:
        pass
PY
  "$mw" --version || true
  echo "gpus used: $n"
} >"$out/environment.txt" 2>&1
cat "$out/environment.txt"

sampler() { # folder: nvidia-smi every 100 ms, every GPU; and each process's use of each GPU
  [ "${MG_CPU_TEST:-}" = 1 ] && return
  nvidia-smi --query-gpu=index,timestamp,memory.used,memory.total --format=csv,noheader,nounits -lms 100 >"$1/nvsmi.csv" 2>/dev/null &
  local a=$!
  nvidia-smi --query-compute-apps=timestamp,gpu_bus_id,pid,used_memory --format=csv,noheader,nounits -lms 200 >"$1/nvsmi-apps.csv" 2>/dev/null &
  echo "$a $!"
}

for entry in "${SCENARIOS[@]}"; do
  IFS='|' read -r name envs cmd <<<"$entry"
  [ $# -gt 0 ] && [[ "$want" != *" $name "* ]] && continue
  d="$out/$name"; rm -rf "$d"; mkdir -p "$d"
  read -r -a cmdv <<<"$cmd"; read -r -a envv <<<"$envs"
  dump=(); [[ "$name" == jax_* ]] && dump=(MG_DUMP_BASE="$d/dump")
  smi=$(sampler "$d")
  t0=$(date +%s%N)
  (cd "$d" && env "${envv[@]}" "${dump[@]}" MG_OUT="$d" timeout -k 10 "$limit" \
     "$mw" run --quiet --out "$d/capture.mwcap" --json-out "$d/run.json" -- "${cmdv[@]}" >"$d/stdout.log" 2>"$d/stderr.log")
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  for p in $smi; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && status=1
  "$py" - "$d/scenario.json" "$name" "$rc" "$ms" "$envs" "$cmd" "$n" "$here" <<'PY'
import json, sys
path, name, rc, ms, envs, cmd, n, here = sys.argv[1:]
json.dump({"name": name, "command": cmd.replace(here + "/", ""), "gpus": int(n),
           "env": dict(e.split("=", 1) for e in envs.split()), "exit_code": int(rc),
           "duration_ms": int(ms)}, open(path, "w"), indent=1)
PY
  if [ -d "$d/dump" ]; then
    find "$d/dump" -type f ! -name '*.txt' -delete
    for r in "$d"/dump/rank*; do [ -d "$r" ] && "$py" "$here/../oom_corpus/prune_dump.py" "$r" "$d/figures.rank${r##*rank}.json" >/dev/null; done
  fi
  "$mw" report "$d/capture.mwcap" >"$d/report.txt" 2>&1
  printf '=== %-14s exit %3s %6s ms  capture %8s B  ' "$name" "$rc" "$ms" "$(stat -c %s "$d/capture.mwcap" 2>/dev/null || echo -)"
  grep -hoE "(RESOURCE_EXHAUSTED|OutOfMemoryError|out of memory)[^\n]{0,90}" "$d/stderr.log" | tail -1; echo
  grep -h "^rank\|^launcher" "$d/stdout.log" | head -8
done

# The node agent with NVML on every GPU, streaming to a daemon: JAX workers preloaded at the
# agent's socket; then the daemon's view of the node and the run.
if [ $# -eq 0 ] || [[ "$want" == *" fleet "* ]]; then
  d="$out/fleet"; rm -rf "$d"; mkdir -p "$d"
  "$mw" serve --db "$d/fleet.db" >"$d/serve.log" 2>&1 &
  serve=$!
  sleep 2
  "$mw" agent --daemon 127.0.0.1:7374 >"$d/agent.out" 2>"$d/agent.log" &
  agent=$!
  for _ in $(seq 50); do grep -q MEMWATCH_SINK= "$d/agent.out" && break; sleep 0.2; done
  sink="$(grep -o 'MEMWATCH_SINK=[^ ]*' "$d/agent.out" | head -1 | cut -d= -f2-)"
  shim="$(dirname "$mw")/libmemwatch_preload.so"
  (cd "$d" && MG_OUT="$d" MEMWATCH_SINK="$sink" LD_PRELOAD="$shim" timeout -k 10 "$limit" \
     "$py" "$here/jax_launch.py" "$n" train 5 1024 8192 >"$d/stdout.log" 2>"$d/stderr.log")
  echo "=== fleet          exit $? (sink $sink)"
  sleep 3   # at least two NVML samples after the run
  for api in nodes runs; do curl -s "127.0.0.1:7373/api/$api" >"$d/api-$api.json"; done
  curl -s -o "$d/overview.html" "127.0.0.1:7373/"
  kill -TERM "$agent"; wait "$agent"; echo "agent exit $?"
  kill -TERM "$serve"; wait "$serve"; echo "serve exit $?"
  "$py" -c "import json,sys; d=json.load(open('$d/api-nodes.json')); print(json.dumps(d)[:1500])"
fi
exit $status
