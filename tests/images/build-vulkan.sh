#!/usr/bin/env bash
# Builds the image the Vulkan probe's tests run `vulkaninfo --summary` in: Debian's
# vulkan-tools and mesa-vulkan-drivers (RADV, ANV, llvmpipe), the packages the kit's
# 02-compute/ollama-vulkan/Dockerfile adds to Ollama's image from Ubuntu's archive. The test
# machines have no GPU, so Vulkan in it lists llvmpipe alone: the probe's refusal, seen by
# the real loader and the real Mesa, not by a stand-in. Cached by tag and package list.
set -euo pipefail
tag="${AIRIG_TEST_VULKAN_IMAGE:-airig-test/vulkan:bookworm}"
mirror="${AIRIG_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages="vulkan-tools,mesa-vulkan-drivers"
have="$(docker image inspect -f '{{ index .Config.Labels "org.airig.vulkan-packages" }}' "$tag" 2>/dev/null || true)"
if [ "$have" = "$packages" ]; then
  echo "vulkan image $tag already present"; exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 1; }
root="$(mktemp -d /tmp/airig-vulkan.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include="$packages" \
  bookworm "$root" "$mirror" >/tmp/airig-debootstrap-vulkan.log 2>&1 \
  || { tail -20 /tmp/airig-debootstrap-vulkan.log >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  -c "LABEL org.airig.vulkan-packages=$packages" - "$tag" >/dev/null
echo "built vulkan image $tag"
