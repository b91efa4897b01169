#!/usr/bin/env bash
# Every image the e2e tests use, each cached by its own script: the Debian base and the
# Vulkan image (debootstrap, side by side: both wait on the network), the stand-ins (on the
# base alone), the wheelhouse, the real PostgreSQL server (build-postgres.sh) and the kit's
# own image (both side by side with the stand-ins: all wait on the base), then the
# stand-ins and PostgreSQL pushed to the test registry.
#
# Three locks in ${TMPDIR:-/tmp}, always taken in this order and each released when its
# part is done, so a test waits only for the images it runs:
#   airig-test-images.lock        the whole build: what the e2e kits' fixture `test_images`
#                                 waits for (tests/e2e/conftest.py)
#   airig-test-images-base.lock   the base and Vulkan images (debootstrap)
#   airig-test-images-stand.lock  the stand-ins
# `--early` takes the last two only: what the e2e modules that start no kit wait for
# (`early_images`: the GPU proofs, the Vulkan probe, the stand-in images), so they run
# while the kit's image still builds. .ci/run starts `--early --force` before its venv
# exists and the whole build once the venv can fill the wheelhouse.
# Usage: tests/images/build-all.sh [--force] [--early]
#   --force  rebuild the stand-ins (the layer cache keeps it fast; a stale tag would hide a
#            stand-in's change)
#   --early  the base, Vulkan and stand-in images only (no venv needed)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
force=() early=0
for arg in "$@"; do
  case "$arg" in
    --force) force=(--force) ;;
    --early) early=1 ;;
    *) echo "unknown option $arg; fix: give --force, --early or nothing" >&2; exit 2 ;;
  esac
done
lock() {  # lock FD NAME: wait for the machine's lock NAME on FD (read-only, as the fixtures
  # open it: any user may lock it)
  local path="${TMPDIR:-/tmp}/$2"
  [ -e "$path" ] || : >"$path"
  eval "exec $1<\"\$path\""
  flock "$1"
}

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

[ "$early" = 1 ] || lock 9 airig-test-images.lock
lock 8 airig-test-images-base.lock
side_by_side "bash '$here/build-base.sh'" "bash '$here/build-vulkan.sh'"
exec 8<&-   # the base and Vulkan images are there: the early modules may start on them
if [ "$early" = 1 ]; then
  lock 7 airig-test-images-stand.lock
  timed "bash '$here/../standins/build.sh' ${force[*]:-}"
  exit 0
fi
timed "bash '$here/wheelhouse.sh'"
# Three at once: the stand-ins (small COPY builds that wait on the engine's layer commits),
# PostgreSQL's (apt-get from Debian's archive) and the kit's own (pip from the wheelhouse).
# On a fresh machine the PostgreSQL image after the stand-ins was the images' critical
# path (stand-ins 3:00 then PostgreSQL 2:36, while the kit's image was done a minute
# before), and every e2e lane waits for all of them (benchmarks/README.md, the suite).
# The stand-ins under their own lock: an --early run may be building them now.
side_by_side "flock '${TMPDIR:-/tmp}/airig-test-images-stand.lock' \
    bash '$here/../standins/build.sh' ${force[*]:-}" \
  "bash '$here/build-postgres.sh' ${force[*]:-}" "python3 '$here/build_kit.py'"
timed "bash '$here/registry.sh' push"
