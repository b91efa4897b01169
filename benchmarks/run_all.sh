#!/usr/bin/env bash
# Regenerate every benchmark's figures and the results tables in benchmarks/README.md.
# Usage: bash benchmarks/run_all.sh        (about 3 minutes on a 2-core host)
# The dispatch benchmark needs redis-server and `pip install celery redis` on the host;
# without them it is skipped and the README says so.
set -uo pipefail
cd "$(dirname "$0")"
mkdir -p results
status=0
python sim.py --json results/makespan.json || status=1
python scale.py --json results/scale.json || status=1
python templates.py --json results/templates.json || status=1
if command -v redis-server >/dev/null && python -c "import celery, redis" 2>/dev/null; then
    python dispatch.py --json results/dispatch.json || status=1
else
    echo "dispatch: skipped (needs redis-server and 'pip install celery redis')" >&2
    rm -f results/dispatch.json
fi
python report.py results README.md
exit $status
