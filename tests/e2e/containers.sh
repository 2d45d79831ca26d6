#!/usr/bin/env bash
# End-to-end test of memwatch's container images (docker/), on Debian's own Docker engine
# with no image registry:
#   1. docker/memwatch-agent.service passes `systemd-analyze verify` (no engine needed);
#   2. an engine answers, or Debian's dockerd is started (root needed: otherwise SKIPPED,
#      said on stdout, as when the engine cannot unpack an image, inside a container
#      without privileges; MEMWATCH_REQUIRE_CONTAINERS=1 turns a skip into a failure);
#   3. scripts/build-images.sh builds the images (profile: release when the work tree has
#      a release build, else debug, the build `cargo test` made; MEMWATCH_IMAGE_PROFILE
#      overrides) and the stack of docker/compose.yaml starts, healthy;
#   4. programs under the shim over the simulated runtime, in third containers, stream
#      through the agent container to the daemon container; what the daemon stored is read
#      back through its API and compared with what the programs did, event for event
#      (tests/e2e/containers_check.py);
#   5. the daemon container is killed (kill -9 of its process) while a workload streams,
#      and again as the agent reconnects to replay its spool; it restarts by its restart
#      policy each time, and nothing stored or acknowledged is lost;
#   6. /metrics and dashboard pages answer on the loopback port, and only with the token;
#   7. docker stop ends agent and daemon cleanly (exit 0, the agent's data acknowledged);
#      everything is torn down: no container, network or volume of the test is left.
# Exit 0: passed or skipped (the reason printed); 1: a check failed.
#   bash tests/e2e/containers.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
T_START=$SECONDS

say() { echo "containers: $*"; }
fail() {
  echo "containers: FAIL: $*"
  exit 1
}
skip() {
  echo "containers: SKIPPED: $*"
  if [[ ${MEMWATCH_REQUIRE_CONTAINERS:-0} == 1 ]]; then
    echo "containers: MEMWATCH_REQUIRE_CONTAINERS=1: a skip is a failure"
    exit 1
  fi
  exit 0
}
step() { echo "== containers: $* ($((SECONDS - T_START)) s)"; }
# A data check that failed: said now, the test goes on (the later checks still tell
# something) and fails at the end.
FAILED=()
failed() {
  echo "containers: FAIL: $*"
  FAILED+=("$*")
}

# -- 1. The systemd unit of the agent --
step "systemd-analyze verify docker/memwatch-agent.service"
# shellcheck source=docker/engine.sh
source docker/engine.sh
command -v systemd-analyze >/dev/null || mw_packages systemd ||
  fail "systemd-analyze is missing and cannot be installed: $MW_ENGINE_WHY"
[[ -x $TARGET/debug/memwatch ]] || cargo build -q --locked -p memwatch --bin memwatch
unit_root=$(mktemp -d)
mkdir -p "$unit_root/usr/local/bin" "$unit_root/etc/systemd/system" "$unit_root/usr/lib/systemd"
# The unit's own tree: systemd's units (targets it names) and the binary it starts.
cp -a /usr/lib/systemd/system "$unit_root/usr/lib/systemd/"
ln "$TARGET/debug/memwatch" "$unit_root/usr/local/bin/memwatch" 2>/dev/null ||
  cp "$TARGET/debug/memwatch" "$unit_root/usr/local/bin/memwatch"
cp docker/memwatch-agent.service "$unit_root/etc/systemd/system/"
verify_out=$(systemd-analyze verify --root="$unit_root" /etc/systemd/system/memwatch-agent.service 2>&1) ||
  fail "systemd-analyze verify: $verify_out"
rm -rf "$unit_root"
# It exits 0 on warnings (unknown keys, bad values): any output is a failure.
[[ -z $verify_out ]] || fail "systemd-analyze verify warned: $verify_out"
say "unit verified (systemd $(systemd-analyze --version | awk 'NR==1{print $2}'))"

# -- 2. The engine --
step "Docker engine"
mw_engine_packages || skip "$MW_ENGINE_WHY"
mw_engine_up || skip "no Docker engine can run here: $MW_ENGINE_WHY"
say "engine $(docker version -f '{{.Server.Version}}'), storage driver $(docker info -f '{{.Driver}}'), started by this test: $MW_ENGINE_STARTED"
# An engine that runs but cannot unpack an image (inside a container without privileges:
# no mount namespaces) cannot run this test either: a one-file image tells.
probe_dir=$(mktemp -d)
: >"$probe_dir/probe"
if ! probe=$(tar -C "$probe_dir" -c probe | docker import - memwatch-e2e-probe:latest 2>&1); then
  rm -rf "$probe_dir"
  mw_engine_down
  grep -q -i -E 'namespace|permission denied|operation not permitted' <<<"$probe" &&
    skip "the engine cannot unpack an image here: $probe"
  fail "docker import of a one-file image failed: $probe"
fi
docker rmi memwatch-e2e-probe:latest >/dev/null 2>&1 || true
rm -rf "$probe_dir"

PROJECT=mwe2e$$
WORK=$(mktemp -d)
compose() { mw_compose -p "$PROJECT" -f docker/compose.yaml "$@"; }
left_behind() {
  {
    docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"
    docker ps -aq --filter "label=memwatch.e2e=$PROJECT"
    docker network ls -q --filter "label=com.docker.compose.project=$PROJECT"
    docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT"
    docker volume ls -q --filter "name=${PROJECT}_"
  } 2>/dev/null | sort -u
}
teardown() {
  local status=$?
  set +e
  if [[ -f $WORK/token ]]; then
    echo "== containers: teardown"
    if ((status != 0)); then
      for s in daemon agent; do
        echo "-- last lines of $s:"
        compose logs --no-color --tail 15 "$s" 2>&1 | sed 's/^/   /'
      done
    fi
    docker ps -aq --filter "label=memwatch.e2e=$PROJECT" | xargs -r docker rm -f >/dev/null
    compose down -v --remove-orphans -t 20 >"$WORK/down.log" 2>&1 || cat "$WORK/down.log"
    local left
    left=$(left_behind)
    if [[ -n $left ]]; then
      echo "containers: FAIL: left behind after teardown: $(echo "$left" | tr '\n' ' ')"
      status=1
    else
      echo "containers: nothing left behind (containers, networks, volumes of $PROJECT)"
    fi
  fi
  mw_engine_down
  rm -rf "$WORK"
  exit "$status"
}
trap teardown EXIT

# -- 3. Images and the stack --
profile=${MEMWATCH_IMAGE_PROFILE:-}
if [[ -z $profile ]]; then
  profile=debug
  [[ -x $TARGET/release/memwatch && -f $TARGET/release/libmemwatch_preload.so ]] && profile=release
fi
step "scripts/build-images.sh --profile $profile"
bash scripts/build-images.sh --profile "$profile" | sed 's/^/   /'
probe=$(docker run --rm --network none memwatch/base:bookworm true 2>&1) || {
  grep -q -i -E 'OCI runtime|namespace|cgroup|permission denied|operation not permitted' <<<"$probe" &&
    skip "the engine cannot start a container here: $probe"
  fail "a container of memwatch/base does not start: $probe"
}

step "stack up (docker/compose.yaml, project $PROJECT)"
# The token file as a deployment keeps it: first line, readable by uid 10001 only.
head -c 30 /dev/urandom | base64 | tr '+/' '-_' >"$WORK/token"
chown 10001:10001 "$WORK/token"
chmod 0400 "$WORK/token"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export MEMWATCH_TOKEN_FILE=$WORK/token MEMWATCH_PORT=$PORT
compose up -d >"$WORK/up.log" 2>&1 || fail "compose up: $(cat "$WORK/up.log")"
DAEMON=$(compose ps -q daemon)
AGENT=$(compose ps -q agent)
[[ -n $DAEMON && -n $AGENT ]] || fail "compose up started no daemon or no agent container"
wait_healthy() {
  local c=$1 what=$2 i h
  for ((i = 0; i < 120; i++)); do
    h=$(docker inspect -f '{{.State.Health.Status}}' "$c")
    [[ $h == healthy ]] && return 0
    sleep 0.5
  done
  fail "$what is not healthy after 60 s (status $h)"
}
wait_healthy "$DAEMON" daemon
wait_healthy "$AGENT" agent
for c in "$DAEMON" "$AGENT"; do
  user=$(docker inspect -f '{{.Config.User}}' "$c")
  [[ $user == memwatch ]] || fail "container $c runs as '$user', not memwatch"
  [[ $(docker exec "$c" id -u) == 10001 ]] || fail "container $c does not run as uid 10001"
done
published=$(docker port "$DAEMON" 7373)
[[ $published == "127.0.0.1:$PORT" ]] || fail "the API is published on '$published', not only 127.0.0.1:$PORT"
say "daemon and agent healthy, as uid 10001; API on $published only"
API=http://127.0.0.1:$PORT
check() { python3 tests/e2e/containers_check.py "$API" "$WORK/token" "$@"; }

# -- 4. Programs under the shim in third containers, through the agent --
step "programs under the shim in workload containers"
mkdir -p "$WORK/lib" "$WORK/expect"
src=agents/preload/tests
cc -O2 -shared -fPIC -o "$WORK/lib/libmemwatch_testrt.so" "$src/runtime/memwatch_testrt.c" \
  "-Wl,--version-script=$src/runtime/memwatch_testrt.map" -lpthread
for n in libamdhip64.so libcuda.so libcudart.so; do ln -s libmemwatch_testrt.so "$WORK/lib/$n"; done
cc -O2 -o "$WORK/lib/mwtest" "$src/c/mwtest.c" -ldl -lpthread
chown 10001:10001 "$WORK/expect"
# A workload container: the agent image's user, the socket volume, the shim the agent
# published there (docker/README.md shows the same for any image).
workload() {
  local name=$1
  shift
  docker run --label "memwatch.e2e=$PROJECT" --name "$PROJECT-$name" --network none \
    -v "${PROJECT}_socket:/run/memwatch" -v "$WORK/lib:/opt/mwtest:ro" -v "$WORK/expect:/out" \
    -e MWTEST_LIBDIR=/opt/mwtest -e LD_PRELOAD=/run/memwatch/libmemwatch_preload.so \
    -e MEMWATCH_SINK=unix:/run/memwatch/agent/agent.sock --entrypoint /bin/sh "$@"
}
# Container c0: the program itself is the container's first process (pid 1).
workload c0 --rm --entrypoint /opt/mwtest/mwtest memwatch/agent-cuda dlsym basic c0-basic-0 \
  >"$WORK/expect/c0-basic-0.txt" || fail "the workload container c0 failed"
# Container c1 (pid 1 a shell, as most images start programs): every API once through
# dlsym and through cuGetProcAddress, and 8 threads on 8 simulated devices.
# Tags (CONTAINER-MODE-INDEX, each program's last argument) name the programs' output.
workload c1 --rm memwatch/agent-cuda -c '
  /opt/mwtest/mwtest dlsym basic c1-basic-0 > /out/c1-basic-0.txt &&
  /opt/mwtest/mwtest proc basic c1-basic-1 > /out/c1-basic-1.txt &&
  /opt/mwtest/mwtest dlsym threads 37 c1-threads-37-2 > /out/c1-threads-37-2.txt' ||
  fail "the workload container c1 failed"
wait_stored() {
  local want=$1 what=$2 i got=0
  for ((i = 0; i < 240; i++)); do
    got=$(check stored)
    ((got >= want)) && return 0
    sleep 0.5
  done
  fail "$what: $got events stored after 120 s, the programs made $want"
}
total1=$(check total "$WORK/expect")
wait_stored "$total1" "container c1"
check verify "$WORK/expect" || failed "what the daemon stored differs from what the programs did"

# -- 5. kill -9 of the daemon while a workload streams --
step "daemon killed (kill -9) while a workload streams, then again as the agent replays"
# Container c2 (another image, so other pids and paths): N programs one after another,
# every third through cuGetProcAddress, some with 8 threads; the kill lands while the
# first quarter is stored and the rest still runs.
N=150
workload c2 -d memwatch/agent-rocm -c "
  i=0
  while [ \$i -lt $N ]; do
    case \$((i % 10)) in
      9) /opt/mwtest/mwtest dlsym threads \$((i + 3)) c2-threads-\$((i + 3))-\$i > /out/c2-threads-\$((i + 3))-\$i.txt ;;
      1|4|7) /opt/mwtest/mwtest proc basic c2-basic-\$i > /out/c2-basic-\$i.txt ;;
      *) /opt/mwtest/mwtest dlsym basic c2-basic-\$i > /out/c2-basic-\$i.txt ;;
    esac || exit 1
    i=\$((i + 1)); sleep 0.05
  done" >/dev/null
for ((i = 0; i < 600; i++)); do
  (($(find "$WORK/expect" -name 'c2-*' | wc -l) >= N / 4)) && break
  sleep 0.05
done
check snapshot "$WORK/before-kill.json" >"$WORK/snapshot.count"
kill_daemon() {
  local pid
  pid=$(docker inspect -f '{{.State.Pid}}' "$DAEMON")
  ((pid > 0)) || fail "the daemon container has no running process to kill"
  kill -9 "$pid"
  echo "$pid"
}
# Restarts of the daemon so far (a restart policy's count), and the agent's connections.
restarts() { docker inspect -f '{{.RestartCount}}' "$DAEMON"; }
connections() { docker logs "$DAEMON" 2>&1 | grep -c 'agent connected' || true; }
wait_restarted() {
  local n=$1 i
  for ((i = 0; i < 120; i++)); do
    (($(restarts) >= n)) && return 0
    sleep 0.5
  done
  fail "the daemon was not restarted by its restart policy (restarts: $(restarts), want $n)"
}
pid=$(kill_daemon)
done_at_kill=$(find "$WORK/expect" -name 'c2-*' | wc -l)
say "killed the daemon (pid $pid) with $(cat "$WORK/snapshot.count") events stored and $done_at_kill of $N programs of c2 done"
((done_at_kill < N)) || fail "the workload ended before the kill: nothing was streaming"
# Second kill: the moment the agent is back, while it replays what it spooled meanwhile.
before=$(connections)
wait_restarted 1
for ((i = 0; i < 400; i++)); do
  (($(connections) > before)) && break
  sleep 0.05
done
(($(connections) > before)) || fail "the agent did not reconnect to the restarted daemon within 20 s"
pid=$(kill_daemon)
say "killed the daemon again (pid $pid) as the agent reconnected to replay its spool"
wait_restarted 2
wait_healthy "$DAEMON" "daemon after the kills"
status=$(docker wait "$PROJECT-c2")
[[ $status == 0 ]] || fail "the workload container c2 exited with $status: $(docker logs "$PROJECT-c2" 2>&1 | tail -n 5)"
total2=$(check total "$WORK/expect")
wait_stored "$total2" "after the restart"
check verify "$WORK/expect" "$WORK/before-kill.json" ||
  failed "after kill -9 and restart, the stored runs differ from what the programs did"

# -- 6. /metrics and the dashboard --
step "/metrics and dashboard pages on the loopback port"
check web "$(cat /etc/hostname 2>/dev/null || hostname)" || failed "/metrics or the dashboard"

# -- 7. Stopping: SIGTERM reaches the agent through its entry point; it drains and says so --
step "docker stop of the agent, then the daemon"
compose stop -t 30 agent >/dev/null 2>&1
code=$(docker inspect -f '{{.State.ExitCode}}' "$AGENT")
[[ $code == 0 ]] || fail "the agent exited with $code on docker stop"
docker logs "$AGENT" 2>&1 | grep -q 'everything acknowledged by the daemon' ||
  fail "the stopped agent did not say everything was acknowledged: $(docker logs "$AGENT" 2>&1 | tail -n 2)"
compose stop -t 30 daemon >/dev/null 2>&1
code=$(docker inspect -f '{{.State.ExitCode}}' "$DAEMON")
[[ $code == 0 ]] || fail "the daemon exited with $code on docker stop"
say "agent and daemon stopped with exit status 0, everything acknowledged"

if ((${#FAILED[@]})); then
  step "FAILED (${#FAILED[@]} checks)"
  printf '   - %s\n' "${FAILED[@]}"
  exit 1
fi
step "passed"
