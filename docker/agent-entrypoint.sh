#!/bin/bash
# Entry point of memwatch/agent-cuda and memwatch/agent-rocm: runs `memwatch agent ARGS`
# with its shim receiver in the shared socket directory ($MEMWATCH_SOCKET_DIR, default
# /run/memwatch, a volume workload containers mount too) and publishes there, at fixed
# paths, what a workload container needs:
#   /run/memwatch/libmemwatch_preload.so   the shim, for LD_PRELOAD
#   /run/memwatch/agent/agent.sock         the agent's socket, for MEMWATCH_SINK=unix:…
# (`agent` links to the agent's private 0700 directory: workloads run as uid 10001 or root.)
# The node name is $MEMWATCH_NODE, else the host's /etc/hostname when mounted at
# /etc/memwatch/host-hostname (compose.yaml does), else the container's host name.
set -euo pipefail
dir=${MEMWATCH_SOCKET_DIR:-/run/memwatch}
if [[ ! -d $dir || ! -w $dir ]]; then
  echo "agent-entrypoint: socket directory $dir is missing or not writable by uid $(id -u)" >&2
  exit 2
fi
# One agent per socket directory: what an agent that did not stop cleanly left goes.
rm -rf -- "$dir"/memwatch-* "$dir/agent"
cp /usr/local/lib/memwatch/libmemwatch_preload.so "$dir/.libmemwatch_preload.so.new"
mv -f "$dir/.libmemwatch_preload.so.new" "$dir/libmemwatch_preload.so"

node=${MEMWATCH_NODE:-}
if [[ -z $node && -r /etc/memwatch/host-hostname ]]; then
  node=$(head -n 1 /etc/memwatch/host-hostname | tr -d '[:space:]')
fi
args=(--socket-dir "$dir")
[[ -n $node ]] && args+=(--node "$node")

memwatch agent "${args[@]}" "$@" &
agent=$!
# docker stop sends SIGTERM to PID 1 (this script): the agent gets it and drains.
trap 'kill -TERM "$agent" 2>/dev/null || true' TERM INT
for ((i = 0; i < 100; i++)); do
  socks=("$dir"/memwatch-*/agent.sock)
  if [[ -S ${socks[0]} ]]; then
    ln -sfn "$(basename "$(dirname "${socks[0]}")")" "$dir/agent"
    break
  fi
  kill -0 "$agent" 2>/dev/null || break
  sleep 0.1
done
status=0
wait "$agent" || status=$?
# wait returns early (128+signal) when a trapped signal arrives: wait for the agent itself.
while kill -0 "$agent" 2>/dev/null; do
  status=0
  wait "$agent" || status=$?
done
exit "$status"
