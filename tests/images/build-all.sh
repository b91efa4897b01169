#!/usr/bin/env bash
# Every image the e2e tests use, each cached by its own script: the Debian base and the
# Vulkan image (debootstrap, side by side: both wait on the network), the wheelhouse, the
# stand-ins with the real PostgreSQL server after them (build-postgres.sh) and the kit's
# own image (side by side: both wait on the base and the wheelhouse), then the stand-ins
# and PostgreSQL pushed to the test registry.
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

both() {  # run two commands side by side; fail when either fails, with its output
  local a b rc=0
  a="$(mktemp)"; b="$(mktemp)"
  bash -c "$1" >"$a" 2>&1 & local pa=$!
  bash -c "$2" >"$b" 2>&1 & local pb=$!
  wait "$pa" || rc=1
  wait "$pb" || rc=1
  cat "$a" "$b"; rm -f "$a" "$b"
  return $rc
}

both "bash '$here/build-base.sh'" "bash '$here/build-vulkan.sh'"
[ "$only" = 0 ] || exit 0
bash "$here/wheelhouse.sh"
both "bash '$here/../standins/build.sh' ${force[*]:-} && bash '$here/build-postgres.sh' ${force[*]:-}" \
  "python3 '$here/build_kit.py'"
bash "$here/registry.sh" push
