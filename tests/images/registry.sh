#!/usr/bin/env bash
# A real image registry for the tests' pull path: Debian's docker-registry (Distribution
# 2.8) on 127.0.0.1, holding the stand-ins under the upstream names of
# 02-compute/images.yaml, so the e2e kit pulls them as a user's kit pulls through
# AIRIG_IMAGE_REGISTRY (a mirror). Not the system service: that one listens on :5000 on
# every address, with htpasswd auth (/etc/docker/registry/config.yml).
# Usage: tests/images/registry.sh [start|push|address|stop]
#   start    run it if it is not running (idempotent); prints its address 127.0.0.1:PORT
#   push     start, then push every image of images.yaml as its stand-in, and the real
#            PostgreSQL test image as library/postgres:15-debian (below), and untag the
#            pushed names locally so a test's pull really reaches the registry (once per
#            stand-in build: a second push of the same images does nothing)
#   address  print the running registry's address; exit 1 when none answers
#   stop     stop it and delete its storage
# State (config, storage, pid, address, log): $AIRIG_TEST_REGISTRY_DIR, default
# ${TMPDIR:-/tmp}/airig-test-registry. Docker allows plain HTTP to 127.0.0.0/8 without
# daemon configuration (its default "Insecure Registries: 127.0.0.0/8").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${AIRIG_TEST_REGISTRY_DIR:-${TMPDIR:-/tmp}/airig-test-registry}"

answers() {  # the registry's API root answers 200 (distribution: GET /v2/ -> {})
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://$1/v2/" 2>/dev/null
}

address() {
  [ -f "$dir/address" ] && [ -f "$dir/pid" ] || return 1
  kill -0 "$(cat "$dir/pid")" 2>/dev/null || return 1
  answers "$(cat "$dir/address")" || return 1
  cat "$dir/address"
}

start() {
  if address >/dev/null; then address; return; fi
  command -v docker-registry >/dev/null || {
    echo "docker-registry missing: apt-get install docker-registry" >&2; exit 1; }
  rm -rf "$dir" && mkdir -p "$dir/storage"
  local port
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  # the packaged config without auth, on loopback, storage in $dir (configuration.md)
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
EOF
  (
    # Close every inherited descriptor above stderr first: run under
    # `flock /tmp/airig-docker.lock`, the daemon would hold that lock for its lifetime.
    for fd in $(ls /proc/self/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done 2>/dev/null
    exec setsid docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 </dev/null
  ) &
  echo $! >"$dir/pid"
  echo "127.0.0.1:$port" >"$dir/address"
  for _ in $(seq 50); do
    if address >/dev/null; then address; return; fi
    sleep 0.2
  done
  tail -5 "$dir/log" >&2
  echo "the registry did not answer on 127.0.0.1:$port" >&2
  exit 1
}

# The postgres service's test image (tests/images/build-postgres.sh): Debian's PostgreSQL
# 15, so not under upstream's `postgres:17` tag the kit names by default but under a tag
# that says what it is; the e2e kit sets POSTGRES_IMAGE to it (test_kit_postgres.py).
POSTGRES_LOCAL=airig-test/postgres:15-debian
POSTGRES_PATH=library/postgres:15-debian

standin_of() {  # the stand-in that plays an upstream repository
  case "$1" in
    ollama/ollama:*) echo airig-test/ollama:test ;;
    yanwk/comfyui-boot:*) echo airig-test/comfyui:test ;;
    ghcr.io/speaches-ai/speaches:*) echo airig-test/whisper:test ;;
    *) echo "no stand-in for $1 (tests/images/registry.sh standin_of)" >&2; exit 1 ;;
  esac
}

path_of() {  # the repository path inside its registry, as AIRIG_IMAGE_REGISTRY keeps it
  local ref="$1" first="${1%%/*}"
  if [ "$first" != "$ref" ] && { [[ "$first" == *[.:]* ]] || [ "$first" = localhost ]; }; then
    ref="${ref#*/}"  # a registry host (ghcr.io): dropped
  elif [ "$first" = "$ref" ]; then
    ref="library/$ref"  # a Docker Hub official image
  fi
  echo "$ref"
}

push() {
  local addr ref target ids
  addr="$(start)"
  # Pushed already, from these very stand-ins: nothing to do. Not only quicker: a push
  # untags what it pushed, and a second push while a kit's `up` is between its pull and its
  # create would take the image from under it (e2e lanes run kits side by side).
  ids="$(docker image inspect -f '{{.Id}}' airig-test/ollama:test airig-test/comfyui:test \
    airig-test/whisper:test "$POSTGRES_LOCAL"; sha256sum "$root/02-compute/images.yaml")"  # and the names
  if [ -f "$dir/pushed" ] && [ "$(cat "$dir/pushed")" = "$ids" ]; then
    echo "stand-ins already pushed to $addr"; return
  fi
  for ref in $(sed -n 's/^[[:space:]-]*image:[[:space:]]*//p' "$root/02-compute/images.yaml" | sort -u); do
    case "$ref" in
      airig/*) continue ;;  # built by the kit on its `base:`, which is pushed by its own name
    esac
    target="$addr/$(path_of "$ref")"
    docker tag "$(standin_of "$ref")" "$target"
    docker push -q "$target" >/dev/null
    docker rmi "$target" >/dev/null  # an untag: the stand-in's own tag keeps the image
    echo "pushed $target"
  done
  target="$addr/$POSTGRES_PATH"
  docker tag "$POSTGRES_LOCAL" "$target"
  docker push -q "$target" >/dev/null
  docker rmi "$target" >/dev/null
  echo "pushed $target"
  echo "$ids" >"$dir/pushed"
}

stop() {
  local pid
  if [ -f "$dir/pid" ]; then
    pid="$(cat "$dir/pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$dir"
  echo "registry stopped"
}

case "${1:-start}" in
  start) start ;;
  push) push ;;
  address) address ;;
  stop) stop ;;
  -h|--help) sed -n '7,12s/^# \{0,1\}//p' "$0" ;;
  *) echo "usage: $0 [start|push|address|stop]" >&2; exit 2 ;;
esac
