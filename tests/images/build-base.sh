#!/usr/bin/env bash
# Builds the Debian base image that tests use in place of python:3.12-slim, because the
# test machines reach no container registry. Cached by tag and package list: a second run
# is a no-op, and a base built with another list (an older checkout's) is rebuilt, since
# builds FROM it have no network to install what it lacks.
set -euo pipefail
tag="${AIRIG_TEST_BASE_IMAGE:-airig-test/base:bookworm}"
mirror="${AIRIG_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# ffmpeg, poppler-utils, tesseract-ocr (+ a font to render PDFs' standard fonts): the media
# task types' tools, which 03-agents/Dockerfile installs with apt unless the base has them.
packages="python3,python3-venv,python3-pip,ca-certificates,curl,ffmpeg,poppler-utils,tesseract-ocr,fonts-dejavu-core"
have="$(docker image inspect -f '{{ index .Config.Labels "org.airig.base-packages" }}' "$tag" 2>/dev/null || true)"
if [ "$have" = "$packages" ]; then
  echo "base image $tag already present"; exit 0
fi
[ -z "$have" ] || echo "base image $tag has other packages: rebuilding it"
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 1; }
root="$(mktemp -d /tmp/airig-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase \
  --include="$packages" \
  bookworm "$root" "$mirror" >/tmp/airig-debootstrap.log 2>&1 \
  || { tail -20 /tmp/airig-debootstrap.log >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# `python` as well as `python3`, as the python:3.12-slim image has both.
ln -sf python3 "$root/usr/bin/python"
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  -c 'CMD ["python3"]' -c "LABEL org.airig.base-packages=$packages" - "$tag" >/dev/null
echo "built base image $tag"
