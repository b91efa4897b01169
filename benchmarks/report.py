"""Write the benchmarks' results (results/*.json) into README.md between markers.

Usage: python benchmarks/report.py RESULTS_DIR README
Only the text between ``<!-- results:start -->`` and ``<!-- results:end -->`` changes.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path

from brain_memory import markdown as memory_table
from dispatch import markdown as dispatch_table
from scale import markdown as scale_table
from sim import markdown as makespan_table
from templates import markdown as templates_table

START, END = "<!-- results:start -->", "<!-- results:end -->"
SECTIONS = (
    ("makespan.json", "Makespan (simulated)", makespan_table),
    ("dispatch.json", "Dispatch (real processes, loopback)", dispatch_table),
    ("scale.json", "Scale (real brain, claim over HTTP)", scale_table),
    ("templates.json", "Template amplification (real brain, hostile claims)", templates_table),
    ("brain_memory.json", "Brain memory (real brain, issue 36's bodies)", memory_table),
)


def host() -> str:
    cores = len(os.sched_getaffinity(0))
    python = platform.python_version()
    return f"{platform.system()} {platform.machine()}, {cores} cores, Python {python}"


def render(results: Path) -> str:
    today = datetime.date.today().isoformat()
    parts = [f"Measured {today} on {host()} by `bash benchmarks/run_all.sh`.", ""]
    for name, title, table in SECTIONS:
        path = results / name
        parts.append(f"### {title}")
        parts.append("")
        if not path.exists():
            parts += ["Not run (see the note in run_all.sh).", ""]
            continue
        data = json.loads(path.read_text())
        lines = [table(data["rows"]), ""]
        lines += [f"- {line}" for line in [*data["verdicts"], *data.get("notes", [])]]
        parts += [*lines, ""]
    return "\n".join(parts)


def main(results: str, readme: str) -> int:
    path = Path(readme)
    text = path.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{render(Path(results))}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
