"""What a busy thread costs a SQLite transaction in the same process (the GIL convoy).

Usage: python benchmarks/gil_convoy.py [--rows 500] [--repeat 5]

Python's sqlite3 gives the GIL away around every step of a statement (one per row for
executemany) and takes it back after; while another thread of the process computes, taking
it back waits for that thread's switch interval (5 ms by default). The brain's writer holds
the store's write lock across its statements, so every such wait is a wait for every
claim and heartbeat queued behind it (benchmarks/fleet.py, the phase table's store_wait).

Side by side in one run, on a table shaped like ``tasks`` (three indexes) in a temp dir on
/dev/shm: a transaction inserting ``--rows`` rows with executemany, and the same rows in one
statement over a JSON array (``json_each``, as ``airig/brain/store/plans.py`` stores a
plan); each alone and beside one thread that computes, at switch intervals of 5 ms (Python's
default) and 1 ms (the brain's, ``airig/brain/__main__.py``). Prints the median and worst
transaction in ms.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, plan TEXT, key TEXT, state TEXT,
                model TEXT, priority INTEGER, payload TEXT, UNIQUE (plan, key));
CREATE INDEX t_queue ON t (state, model, priority);
CREATE INDEX t_plan_state ON t (plan, state);
"""


def rows_for(plan: str, n: int) -> list[tuple]:
    return [(plan, f"t{i}", "READY", f"m{i % 3}", i % 7, json.dumps({"prompt": f"doc {i}"}))
            for i in range(n)]  # fmt: skip


def many(conn: sqlite3.Connection, plan: str, n: int) -> None:
    conn.executemany(
        "INSERT INTO t (plan, key, state, model, priority, payload) VALUES (?,?,?,?,?,?)",
        rows_for(plan, n),
    )


def one(conn: sqlite3.Connection, plan: str, n: int) -> None:
    conn.execute(
        "INSERT INTO t (plan, key, state, model, priority, payload) SELECT value ->> 0,"
        " value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5 FROM json_each(?)"
        " ORDER BY key + 0",
        (json.dumps(rows_for(plan, n)),),
    )


def spin(stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1


def measure(way, rows: int, repeat: int, busy: bool, interval: float) -> list[float]:
    sys.setswitchinterval(interval)
    stop = threading.Event()
    spinner = threading.Thread(target=spin, args=(stop,)) if busy else None
    times = []
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        conn = sqlite3.connect(Path(d) / "t.db", isolation_level=None)
        conn.executescript(SCHEMA)
        if spinner:
            spinner.start()
        try:
            for n in range(repeat):
                start = time.perf_counter()
                conn.execute("BEGIN IMMEDIATE")
                way(conn, f"p{n}", rows)
                conn.execute("COMMIT")
                times.append((time.perf_counter() - start) * 1000)
        finally:
            stop.set()
            if spinner:
                spinner.join()
            conn.close()
            sys.setswitchinterval(0.005)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"| insert of {args.rows} rows | beside | switch interval | median ms | worst ms |")
    print("|---|---|---:|---:|---:|")
    for name, way in (("executemany", many), ("one statement (json_each)", one)):
        for busy in (False, True):
            for interval in (0.005, 0.001):
                if not busy and interval != 0.005:
                    continue  # alone, the interval never comes into play
                got = measure(way, args.rows, args.repeat, busy, interval)
                print(f"| {name} | {'one busy thread' if busy else 'nothing'} "
                      f"| {interval * 1000:g} ms | {statistics.median(got):.1f} "
                      f"| {max(got):.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
