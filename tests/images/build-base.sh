#!/usr/bin/env bash
# Builds the Debian base image that tests use in place of python:3.12-slim, because the
# test machines reach no container registry. Cached by tag: a second run is a no-op.
set -euo pipefail
tag="${AIRIG_TEST_BASE_IMAGE:-airig-test/base:bookworm}"
mirror="${AIRIG_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag already present"; exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 1; }
root="$(mktemp -d /tmp/airig-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase \
  --include=python3,python3-venv,python3-pip,ca-certificates,curl \
  bookworm "$root" "$mirror" >/tmp/airig-debootstrap.log 2>&1 \
  || { tail -20 /tmp/airig-debootstrap.log >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# `python` as well as `python3`, as the python:3.12-slim image has both.
ln -sf python3 "$root/usr/bin/python"
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  -c 'CMD ["python3"]' - "$tag" >/dev/null
echo "built base image $tag"
