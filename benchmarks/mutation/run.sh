#!/usr/bin/env bash
# Mutation testing of the modules that guard correctness (leases and fencing, the model
# verifier, the GPU profile decision, residency and candidates): a score per module.
#
#   bash benchmarks/mutation/run.sh                    # all modules, one test process
#   bash benchmarks/mutation/run.sh --max-children 2   # two at a time
#   bash benchmarks/mutation/run.sh --module leases    # targets whose path has "leases"
#   bash benchmarks/mutation/run.sh --keep --diffs     # keep /tmp copy, whole diffs
#
# mutmut 3 goes into a throwaway venv (AIRIG_MUTMUT_VENV, default /tmp/airig-mutmut-venv)
# that sees this Python's packages; the tree is copied under /tmp (AIRIG_MUTATION_WORK)
# and mutmut's config is written into the copy's pyproject.toml, so the repository never
# gets a mutants/ folder. Not part of CI. Exits 1 when a module scores below 90%.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
venv="${AIRIG_MUTMUT_VENV:-/tmp/airig-mutmut-venv}"
work="${AIRIG_MUTATION_WORK:-/tmp/airig-mutation}"

# One pinned version: its mutation operators decide which mutants exist (and so the
# entries of equivalent.tsv), and mutation.py reads its result files.
mutmut_version=3.8.1
have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mutmut"))' \
    2>/dev/null || true)"
if [ "$have" != "$mutmut_version" ]; then
    echo "installing mutmut $mutmut_version into $venv" >&2
    [ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install --quiet "mutmut==$mutmut_version"
fi

exec nice "$venv/bin/python" "$here/mutation.py" --mutmut "$venv/bin/mutmut" --work "$work" "$@"
