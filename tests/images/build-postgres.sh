#!/usr/bin/env bash
# Builds the real PostgreSQL server the e2e kit's `postgres` service runs
# (tests/standins/postgres: Debian bookworm's postgresql-15 on the debootstrap base, with
# upstream's entrypoint contract), tagged airig-test/postgres:15-debian. Cached by tag and
# by the sha256 of its folder and the base image's id: a second run is a no-op, a changed
# Dockerfile or entrypoint (or a rebuilt base) builds again.
# The build installs Debian's packages, so it needs the Debian mirror as debootstrap does
# (AIRIG_DEBIAN_MIRROR); it runs on the host's network, which reaches that mirror.
# Usage: tests/images/build-postgres.sh [--force]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
context="$here/../standins/postgres"
tag="${AIRIG_TEST_POSTGRES_IMAGE:-airig-test/postgres:15-debian}"
base="${AIRIG_TEST_BASE_IMAGE:-airig-test/base:bookworm}"
mirror="${AIRIG_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    *) echo "unknown option $arg; fix: give --force or nothing" >&2; exit 2 ;;
  esac
done
base_id="$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null)" || {
  echo "base image $base missing: run tests/images/build-base.sh first" >&2; exit 1; }
digest="$( { (cd "$context" && sha256sum Dockerfile docker-entrypoint.sh); echo "$base_id"; } \
  | sha256sum | cut -c1-64)"
have="$(docker image inspect -f '{{ index .Config.Labels "org.airig.postgres-source" }}' "$tag" 2>/dev/null || true)"
if [ "$force" = 0 ] && [ "$have" = "$digest" ]; then
  echo "postgres image $tag already present"; exit 0
fi
if ! log="$(docker build -q --network host --build-arg "BASE_IMAGE=$base" \
    --build-arg "DEBIAN_MIRROR=$mirror" --label "org.airig.postgres-source=$digest" \
    -t "$tag" "$context" 2>&1)"; then
  echo "$log" | tail -30 >&2
  echo "building $tag failed" >&2
  exit 1
fi
echo "built postgres image $tag"
