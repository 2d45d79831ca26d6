#!/bin/bash
# Entry point of memwatch/agent-cuda and memwatch/agent-rocm: publishes the shim in the
# shared socket directory ($MEMWATCH_SOCKET_DIR, default /run/memwatch, a volume workload
# containers mount too), then becomes `memwatch agent ARGS` listening there at a fixed path:
#   /run/memwatch/libmemwatch_preload.so   the shim, for LD_PRELOAD
#   /run/memwatch/agent/agent.sock         the agent's socket, for MEMWATCH_SINK=unix:…
# The socket is the agent user's only (0600: workloads run as uid 10001 or root); pass
# `--socket-mode 0660 --socket-group GROUP` (or 0666) in the command to let others in.
# The node name is $MEMWATCH_NODE, else the host's /etc/hostname when mounted at
# /etc/memwatch/host-hostname (compose.yaml does), else the container's host name.
set -euo pipefail
dir=${MEMWATCH_SOCKET_DIR:-/run/memwatch}
if [[ ! -d $dir || ! -w $dir ]]; then
  echo "agent-entrypoint: socket directory $dir is missing or not writable by uid $(id -u)" >&2
  exit 2
fi
cp /usr/local/lib/memwatch/libmemwatch_preload.so "$dir/.libmemwatch_preload.so.new"
mv -f "$dir/.libmemwatch_preload.so.new" "$dir/libmemwatch_preload.so"
# What an agent of an older image left (a link to its private socket directory) goes.
[[ -L $dir/agent ]] && rm -f -- "$dir/agent"
rm -rf -- "$dir"/memwatch-*

node=${MEMWATCH_NODE:-}
if [[ -z $node && -r /etc/memwatch/host-hostname ]]; then
  node=$(head -n 1 /etc/memwatch/host-hostname | tr -d '[:space:]')
fi
args=(--socket "$dir/agent/agent.sock")
[[ -n $node ]] && args+=(--node "$node")
# The agent is PID 1: docker stop's SIGTERM reaches it directly, and it drains.
exec memwatch agent "${args[@]}" "$@"
