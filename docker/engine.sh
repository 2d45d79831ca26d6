# shellcheck shell=bash disable=SC2034  # (MW_* are read by the scripts that source this)
# Sourced by scripts/build-images.sh and tests/e2e/containers.sh: one place that knows how
# to reach a Docker engine on Debian 12 without any image registry.
#
#   mw_engine_packages   installs Debian's docker.io, docker-compose and mmdebstrap if missing
#                        (the --engine group of scripts/install-deps.sh)
#   mw_packages PKG...   installs those of the Debian packages PKG that are missing
#   mw_engine_up         makes sure an engine answers; when none does and we are root, starts
#                        Debian's dockerd in the background (sets MW_ENGINE_STARTED=1)
#   mw_engine_down       stops the dockerd that mw_engine_up started (and only that one)
#   mw_compose           runs `docker compose` (plugin) or Debian's `docker-compose`
#   mw_fresh_base [--rebuild]  makes $MW_FRESH_BASE (a minimal Debian 12) unless the engine
#                        has it (scripts/fresh-machine.sh, tests/e2e/wheel.sh)
#
# Functions return non-zero with the reason in MW_ENGINE_WHY instead of exiting, so the
# caller decides whether that is an error (building) or a reason to skip (the test).

# The engine's packages: scripts/install-deps.sh --engine (the one list of what is installed).
mapfile -t MW_ENGINE_PACKAGES < <(bash scripts/install-deps.sh --list --engine)
MW_ENGINE_STATE=${MW_ENGINE_STATE:-/var/lib/memwatch-engine}
MW_ENGINE_STARTED=0
MW_ENGINE_WHY=""

mw_sudo() {
  if [[ $(id -u) == 0 ]]; then "$@"; else sudo -n "$@"; fi
}

mw_engine_packages() {
  mw_packages "${MW_ENGINE_PACKAGES[@]}"
}

# mw_packages PKG...: installs the Debian packages among PKG that are missing.
mw_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) != 0 ]] && ! sudo -n true 2>/dev/null; then
    MW_ENGINE_WHY="${missing[*]} not installed and no root (or password-less sudo) to install them"
    return 1
  fi
  echo "engine: installing ${missing[*]} (Debian packages)" >&2
  # policy-rc.d-less machines without systemd just fail to start the service: not needed.
  if ! { mw_sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive mw_sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null; }; then
    MW_ENGINE_WHY="apt-get could not install ${missing[*]}"
    return 1
  fi
}

mw_engine_answers() {
  docker info >/dev/null 2>&1
}

# Starts Debian's dockerd the way that works without a registry or a firewall: no default
# bridge (compose makes its own network), no iptables rules, storage driver chosen by
# dockerd (overlay2 where the kernel allows it, else vfs).
mw_engine_up() {
  mw_engine_answers && return 0
  if [[ $(id -u) != 0 ]]; then
    MW_ENGINE_WHY="no Docker engine answers and starting dockerd needs root (uid $(id -u))"
    return 1
  fi
  command -v dockerd >/dev/null || {
    MW_ENGINE_WHY="dockerd is not installed"
    return 1
  }
  mkdir -p "$MW_ENGINE_STATE"
  local log="$MW_ENGINE_STATE/dockerd.log"
  echo "engine: starting Debian's dockerd (log $log)" >&2
  setsid dockerd --iptables=false --ip-forward=false --bridge=none \
    --pidfile "$MW_ENGINE_STATE/dockerd.pid" >"$log" 2>&1 </dev/null &
  local pid=$! i
  for ((i = 0; i < 60; i++)); do
    if mw_engine_answers; then
      MW_ENGINE_STARTED=1
      echo "$pid" >"$MW_ENGINE_STATE/started-by-memwatch.pid"
      echo "engine: dockerd $pid up, storage driver $(docker info -f '{{.Driver}}' 2>/dev/null)" >&2
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      MW_ENGINE_WHY="dockerd exited at start: $(grep -E 'level=(fatal|error)|failed' "$log" | tail -n 3 | tr '\n' ' ')"
      return 1
    fi
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  MW_ENGINE_WHY="dockerd did not answer within 30 s: $(tail -n 3 "$log" | tr '\n' ' ')"
  return 1
}

mw_engine_down() {
  [[ $MW_ENGINE_STARTED == 1 ]] || return 0
  local pidfile="$MW_ENGINE_STATE/started-by-memwatch.pid" pid i
  pid=$(cat "$pidfile" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 40; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  rm -f "$pidfile"
  MW_ENGINE_STARTED=0
}

mw_compose() {
  if docker compose version >/dev/null 2>&1; then
    docker compose "$@"
  else
    docker-compose "$@"
  fi
}

# A fresh Debian 12 machine as an image: what a minimal install has (mmdebstrap
# --variant=minbase bookworm, from Debian's mirror), made once per recipe.
MW_FRESH_BASE=memwatch/fresh-debian:bookworm
MW_FRESH_RECIPE=minbase-bookworm
mw_fresh_base() {
  if [[ ${1:-} != --rebuild ]] &&
    [[ $(docker image inspect -f '{{index .Config.Labels "memwatch.fresh-recipe"}}' "$MW_FRESH_BASE" 2>/dev/null) == "$MW_FRESH_RECIPE" ]]; then
    return 0
  fi
  local tmp
  tmp=$(mktemp -d)
  echo "engine: making $MW_FRESH_BASE (mmdebstrap --variant=minbase bookworm)" >&2
  if ! mmdebstrap --variant=minbase bookworm "$tmp/base.tar" >"$tmp/mmdebstrap.log" 2>&1; then
    MW_ENGINE_WHY="mmdebstrap failed (it needs Debian's package mirror): $(tail -n 3 "$tmp/mmdebstrap.log" | tr '\n' ' ')"
    rm -rf "$tmp"
    return 1
  fi
  docker import --change "LABEL memwatch.fresh-recipe=$MW_FRESH_RECIPE" "$tmp/base.tar" "$MW_FRESH_BASE" >/dev/null
  rm -rf "$tmp"
}
