#!/usr/bin/env bash
# Fills 03-agents/wheels/ with wheels of airig and every dependency the image installs (the
# extras 03-agents/Dockerfile names: server, provision, gateway), for image builds on
# machines whose containers cannot reach PyPI. Built for the test base image's Python
# (Debian bookworm: CPython 3.11, manylinux x86_64). Cached: reruns only add what is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/03-agents/wheels"
mkdir -p "$out"
stamp="$out/.stamp-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ -f "$stamp" ]; then echo "wheelhouse up to date"; exit 0; fi
python3 -m pip wheel --quiet --wheel-dir "$out" "$root[server,provision,gateway]" setuptools wheel
rm -f "$out"/airig-*.whl "$out"/.stamp-*   # the image installs airig from its source
touch "$stamp"
echo "wheelhouse ready: $(ls "$out" | wc -l) wheels"
