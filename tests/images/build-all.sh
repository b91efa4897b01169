#!/usr/bin/env bash
# Every image the e2e tests use, each cached by its own script: the Debian base and the
# Vulkan image (debootstrap, side by side: both wait on the network), the wheelhouse, the
# stand-ins, the real PostgreSQL server (build-postgres.sh) and the kit's own image (the
# three side by side: all wait on the base and the wheelhouse), then the stand-ins and
# PostgreSQL pushed to the test registry.
# One run at a time on a machine: it holds ${TMPDIR:-/tmp}/airig-test-images.lock, the lock
# the e2e fixture `test_images` takes (tests/e2e/conftest.py), so .ci/run can build in the
# background while the unit tests run and the e2e kits wait for it.
# Usage: tests/images/build-all.sh [--force] [--debootstrap-only]
#   --force             rebuild the stand-ins (the layer cache keeps it fast; a stale tag
#                       would hide a stand-in's change)
#   --debootstrap-only  the base and Vulkan images only (before a venv exists: the rest
#                       needs its pip)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
force=() only=0
for arg in "$@"; do
  case "$arg" in
    --force) force=(--force) ;;
    --debootstrap-only) only=1 ;;
    *) echo "unknown option $arg; fix: give --force, --debootstrap-only or nothing" >&2; exit 2 ;;
  esac
done
lock="${TMPDIR:-/tmp}/airig-test-images.lock"
[ -e "$lock" ] || : >"$lock"
exec 9<"$lock"   # read-only, as the fixture opens it: any user may lock it
flock 9

timed() {  # run the command; then say when it ended and what it took (the run's critical path)
  local began=$SECONDS rc=0
  bash -c "$1" || rc=$?
  echo "  (ended $(date +%T), $((SECONDS - began)) s)"
  return $rc
}

side_by_side() {  # run the commands at once; fail when any fails, with every output
  local cmd rc=0 pid
  local -a logs=() pids=()
  for cmd in "$@"; do
    logs+=("$(mktemp)")
    timed "$cmd" >"${logs[-1]}" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  cat "${logs[@]}"; rm -f "${logs[@]}"
  return $rc
}

side_by_side "bash '$here/build-base.sh'" "bash '$here/build-vulkan.sh'"
[ "$only" = 0 ] || exit 0
timed "bash '$here/wheelhouse.sh'"
# Three at once: the stand-ins (small COPY builds that wait on the engine's layer commits),
# PostgreSQL's (apt-get from Debian's archive) and the kit's own (pip from the wheelhouse).
# On a fresh machine the PostgreSQL image after the stand-ins was the images' critical
# path (stand-ins 3:00 then PostgreSQL 2:36, while the kit's image was done a minute
# before), and every e2e lane waits for all of them (benchmarks/README.md, the suite).
side_by_side "bash '$here/../standins/build.sh' ${force[*]:-}" \
  "bash '$here/build-postgres.sh' ${force[*]:-}" "python3 '$here/build_kit.py'"
timed "bash '$here/registry.sh' push"
