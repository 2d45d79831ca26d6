#!/usr/bin/env bash
# Starts Debian's PostgreSQL cluster (if needed), creates the test role and database
# (if needed) and prints the URL for MEMWATCH_TEST_POSTGRES_URL. Idempotent.
#   export MEMWATCH_TEST_POSTGRES_URL=$(bash scripts/start-test-postgres.sh)
# The role may create databases: each daemon test makes its own.
set -euo pipefail
ROLE=memwatch_test
PASS=memwatch_test
DB=memwatch_test
PORT=${MEMWATCH_TEST_POSTGRES_PORT:-5432}

if ! command -v pg_lsclusters >/dev/null; then
  echo "start-test-postgres: postgresql is not installed (bash scripts/install-deps.sh)" >&2
  exit 2
fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
read -r VER NAME _ < <(pg_lsclusters --no-header | head -n1) || true
if [ -z "${VER:-}" ]; then
  VER=$(ls /usr/lib/postgresql | sort -V | tail -n1)
  NAME=main
  $SUDO pg_createcluster "$VER" "$NAME" --port "$PORT" >&2
fi
if ! pg_lsclusters --no-header | awk -v v="$VER" -v n="$NAME" '$1==v && $2==n {print $4}' | grep -q online; then
  # pg_ctlcluster talks on stdout ("Removed stale pid file."): only the URL may go there.
  $SUDO pg_ctlcluster "$VER" "$NAME" start >&2
fi
PORT=$(pg_lsclusters --no-header | awk -v v="$VER" -v n="$NAME" '$1==v && $2==n {print $3}')
if [ "$(id -u)" = 0 ]; then AS_PG=(runuser -u postgres --); else AS_PG=(sudo -u postgres); fi
psql_as_postgres() { "${AS_PG[@]}" psql -p "$PORT" -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(psql_as_postgres -c "SELECT 1 FROM pg_roles WHERE rolname='$ROLE'")" != 1 ]; then
  psql_as_postgres -c "CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASS'" >&2
fi
if [ "$(psql_as_postgres -c "SELECT 1 FROM pg_database WHERE datname='$DB'")" != 1 ]; then
  psql_as_postgres -c "CREATE DATABASE $DB OWNER $ROLE" >&2
fi
# Each daemon / gate test creates its own database (mwtest_<test>_<pid>_<ns>,
# mwgate_<pid>_<ns>) and leaves it for inspection. Those whose test process is gone are
# dropped here, so repeated runs do not pile them up (one machine had 504 of them, 7.5 GB,
# and PostgreSQL's crash recovery then outlasted pg_ctl's start timeout).
psql_as_postgres -c "SELECT datname FROM pg_database WHERE datname ~ '^mw(test_.+|gate)_[0-9]+_[0-9]+$'" |
  while read -r db; do
    pid=$(awk -F_ '{print $(NF-1)}' <<<"$db")
    [ -d "/proc/$pid" ] || psql_as_postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >&2
  done
echo "postgres://$ROLE:$PASS@127.0.0.1:$PORT/$DB"
