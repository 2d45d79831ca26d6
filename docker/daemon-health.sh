#!/bin/bash
# HEALTHCHECK of memwatch/daemon: GET /metrics on the API port (which reads the store)
# answers 200. Plain bash (/dev/tcp): the image carries no HTTP client.
tok=${MEMWATCH_TOKEN:-}
if [[ -n ${MEMWATCH_TOKEN_FILE:-} ]]; then
  tok=$(sed -n '1{s/^[[:space:]]*//;s/[[:space:]]*$//;p;}' "$MEMWATCH_TOKEN_FILE") || exit 1
fi
exec 3<>"/dev/tcp/127.0.0.1/${MEMWATCH_API_PORT:-7373}" || exit 1
printf 'GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' "$tok" >&3
IFS= read -r -t 3 status <&3 || exit 1
[[ $status == "HTTP/1.1 200 "* ]] || {
  echo "memwatch daemon answered: $status"
  exit 1
}
