#!/bin/sh
# Entry point of memwatch/daemon: `memwatch serve ARGS`, with the token read from the file
# $MEMWATCH_TOKEN_FILE names (a compose secret) when set, so it never appears in the
# container's configuration or on a command line.
set -eu
if [ -n "${MEMWATCH_TOKEN_FILE:-}" ]; then
  if [ ! -r "$MEMWATCH_TOKEN_FILE" ]; then
    echo "memwatch-daemon: cannot read the token file $MEMWATCH_TOKEN_FILE as uid $(id -u)" \
      "(MEMWATCH_TOKEN_FILE; make it readable by uid $(id -u))" >&2
    exit 2
  fi
  MEMWATCH_TOKEN=$(sed -n '1{s/^[[:space:]]*//;s/[[:space:]]*$//;p;}' "$MEMWATCH_TOKEN_FILE")
  if [ -z "$MEMWATCH_TOKEN" ]; then
    echo "memwatch-daemon: the first line of $MEMWATCH_TOKEN_FILE is empty (the token goes there)" >&2
    exit 2
  fi
  export MEMWATCH_TOKEN
fi
exec memwatch serve "$@"
