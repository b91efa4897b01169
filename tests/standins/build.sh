#!/usr/bin/env bash
# Builds the test-only stand-in images for Ollama, ComfyUI, Whisper (speaches) and the
# model file host. Cached by tag: an image already present is skipped unless --force.
# Usage: tests/standins/build.sh [--force] [name ...]   (names: ollama comfyui whisper filehost provider)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
base="${AIRIG_TEST_BASE_IMAGE:-airig-test/base:bookworm}"
force=0
names=()
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) names+=("$arg") ;;
  esac
done
[ "${#names[@]}" -gt 0 ] || names=(ollama comfyui whisper filehost provider)
if ! docker image inspect "$base" >/dev/null 2>&1; then
  echo "base image $base missing: run tests/images/build-base.sh first" >&2
  exit 1
fi
for name in "${names[@]}"; do
  [ -f "$here/$name/Dockerfile" ] || { echo "unknown stand-in: $name" >&2; exit 1; }
done
build_one() {  # build_one NAME: its line on stdout, the build's output only on failure
  local name="$1" tag="airig-test/$1:test" log
  if [ "$force" -eq 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "stand-in $tag already present"
    return 0
  fi
  # Output only on failure: the legacy builder's deprecation notice is noise here.
  if ! log="$(docker build -q --build-arg "BASE_IMAGE=$base" -t "$tag" "$here/$name" 2>&1)"; then
    echo "$log" >&2
    echo "building $tag failed" >&2
    return 1
  fi
  echo "built stand-in $tag"
}
# Side by side: each build is a few COPY and metadata steps, and the legacy builder spends
# them waiting on the engine's layer commits, not on a CPU (five in a row took 91 s on a
# loaded 2-core host, five at once 66 s). Each one's lines are printed in the names' order.
declare -a pids=() logs=()
for name in "${names[@]}"; do
  logs+=("$(mktemp)")
  build_one "$name" >"${logs[-1]}" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || rc=1
  cat "${logs[$i]}"
done
rm -f "${logs[@]}"
exit $rc
