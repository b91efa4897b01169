#!/usr/bin/env bash
# Regenerate every benchmark's figures and the results tables in benchmarks/README.md.
# Usage: bash benchmarks/run_all.sh        (about 30 minutes on a 2-core host; retention ~25)
# The dispatch benchmark needs redis-server and `pip install celery redis` on the host;
# without them it is skipped and the README says so.
set -uo pipefail
cd "$(dirname "$0")"
mkdir -p results
status=0
python sim.py --json results/makespan.json || status=1
python sim_whisper.py --json results/whisper_per_gpu.json || status=1
python scale.py --json results/scale.json || status=1
python fanout.py || status=1
python templates.py --json results/templates.json || status=1
# Issue 36's bodies, one brain each (~2 min); the README's before/after rows are by hand.
python brain_memory.py --json results/brain_memory.json || status=1
if command -v redis-server >/dev/null && python -c "import celery, redis" 2>/dev/null; then
    python dispatch.py --json results/dispatch.json || status=1
else
    echo "dispatch: skipped (needs redis-server and 'pip install celery redis')" >&2
    rm -f results/dispatch.json
fi
# Retention: 90 simulated days (~25 min); rewrites its own section of README.md.
python retention.py --json results/retention.json --readme README.md || status=1
# Fleet: a real brain and simulated rigs; --quick is 10 and 50 workers (~2 min). The README's
# fleet section comes from the full sweep: python fleet.py --json results/fleet.json --readme README.md
python fleet.py --quick --json results/fleet-quick.json || status=1
# Launcher cost: needs Docker and the stand-in images (tests/standins/build.sh; exit 2 = not run).
python launcher.py --json results/launcher.json --readme README.md
[ $? -eq 1 ] && status=1
python report.py results README.md
exit $status
