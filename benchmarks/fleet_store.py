"""The brains a fleet step runs against, for ``fleet.py``: one brain on its SQLite file, or
N brain processes sharing one PostgreSQL database (``--store postgres --brains N``).

PostgreSQL is a throwaway cluster of Debian's binaries (``tests/pg_cluster.py``) in a new
folder of the state folder, started durable (fsync on, a WAL flush per durable commit):
the tests' cluster runs without fsync, which would flatter the store against SQLite's
fsync'd commits. Brain 0 starts first and takes the timers lock (reaper, retention), so
``--kill-brain-at`` kills the brain holding them, the harder case.

After a step with a kill, ``audit`` reads the store itself: the tasks that never reached
SUCCEEDED once the run drained (lost), and the tasks with two ``task_completed`` events
(completed twice).
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procs import REPO, Brain

sys.path.append(str(REPO / "tests"))
# the brain answers "this brain runs the store's timers" once it holds them (store/pg.py)
LEADS = "this brain runs the store's timers"
UNFINISHED = "('PENDING', 'READY', 'LEASED', 'RUNNING', 'RETRY_WAIT', 'ESCALATED')"


@dataclass
class Fleet:
    """The running brains of one step and what reads their store."""

    store: str
    brains: list[Brain]
    state: Path  # the folder beside the store (SQLite's state/, the cluster's folder)
    dsn: str = ""  # psycopg's connection string of the database (postgres only)
    cluster: Any = None  # pg_cluster.Cluster (postgres only)
    killed: set[int] = field(default_factory=set)

    @property
    def urls(self) -> list[str]:
        return [brain.url for brain in self.brains]

    def alive(self) -> list[Brain]:
        return [b for i, b in enumerate(self.brains) if i not in self.killed]

    def kill(self, index: int) -> None:
        """SIGKILL: no shutdown, its connections cut; left a zombie until the step ends so
        its CPU counters stay readable."""
        process = self.brains[index].process
        assert process is not None
        process.kill()
        self.killed.add(index)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.store == "sqlite":
            path = self.state / "brain.db"
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
            try:
                return conn.execute(sql).fetchall()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.dsn) as server:
            return server.execute(sql).fetchall()

    def db_bytes(self) -> int:
        """Bytes the data takes: SQLite's live pages (WAL included), PostgreSQL's database
        size (tables, indexes, TOAST; its WAL is the cluster's, not counted)."""
        if self.store == "postgres":
            return int(self.query("SELECT pg_database_size(current_database())")[0][0])
        path = self.state / "brain.db"
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        finally:
            conn.close()
        return int((pages - free) * size)

    def unfinished(self) -> int:
        return int(self.query(f"SELECT count(*) FROM tasks WHERE state IN {UNFINISHED}")[0][0])

    def audit(self) -> dict[str, Any]:
        """What the store says once the run drained: every task submitted, those not
        SUCCEEDED (lost, by state), those completed more than once (by their events)."""
        states = dict(self.query("SELECT state, count(*) FROM tasks GROUP BY state"))
        twice = self.query(
            "SELECT task_id, count(*) FROM events WHERE event_type = 'task_completed' "
            "GROUP BY task_id HAVING count(*) > 1"
        )
        retried = self.query("SELECT count(*) FROM tasks WHERE attempt > 1")[0][0]
        return {
            "submitted": sum(states.values()),
            "lost": sum(n for state, n in states.items() if state != "SUCCEEDED"),
            "lost_by_state": {s: n for s, n in states.items() if s != "SUCCEEDED"},
            "completed_twice_events": len(twice),
            "retried_tasks": int(retried),
        }

    def server_pids(self) -> list[int]:
        """The PostgreSQL server's processes (postmaster and its backends): its CPU."""
        if self.cluster is None or self.cluster.process is None:
            return []
        root = self.cluster.process.pid
        found = [root]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == root:
                    found.append(int(stat.parent.name))
        return found


@contextlib.contextmanager
def fleet(store: str, brains: int, state_dir: str | None, code: Path,
          extra: dict[str, str]) -> Iterator[Fleet]:  # fmt: skip
    """The step's brains, started (brain 0 leading), always stopped and removed after."""
    if store == "sqlite":
        with tempfile.TemporaryDirectory(prefix="airig-fleet-", dir=state_dir) as tmp:
            brain = Brain(Path(tmp), extra, code=code)
            try:
                brain.start()
                yield Fleet("sqlite", [brain], Path(tmp) / "state")
            finally:
                brain.stop()
        return
    # tests/pg_cluster.py, by name: the benchmarks are no package of the tests'
    pg_cluster = importlib.import_module("pg_cluster")
    bin_dir = pg_cluster.binaries()
    if bin_dir is None:
        raise SystemExit("fleet: --store postgres needs PostgreSQL's server binaries "
                         "(Debian: apt-get install postgresql)")  # fmt: skip
    # A folder of its own, not inside a root-only temporary folder: as root the server
    # runs as nobody (pg_cluster), who must reach it.
    folder = Path(tempfile.mkdtemp(prefix="airig-fleet-pg-", dir=state_dir))
    roots = Path(tempfile.mkdtemp(prefix="airig-fleet-", dir=state_dir))
    cluster = pg_cluster.Cluster.start(bin_dir, folder, durable=True)
    running: list[Brain] = []
    try:
        url = cluster.database()
        env = {**extra, "BRAIN_DATABASE_URL": url, "BRAIN_RESULTS_DIR": str(roots / "results")}
        name = url.split("@/", 1)[1].split("?", 1)[0]
        made = Fleet("postgres", [], folder, dsn=cluster.dsn(name), cluster=cluster)
        for n in range(brains):
            brain = Brain(roots / f"brain{n}", env, code=code)
            brain.root.mkdir(parents=True, exist_ok=True)
            running.append(brain)
            brain.start()
            if n == 0:
                wait_for(lambda: LEADS in (roots / "brain0" / "brain.log").read_text(), 15)
        made.brains = running
        yield made
    finally:
        for brain in running:
            brain.stop()
        cluster.stop()
        shutil.rmtree(roots, ignore_errors=True)


def wait_for(check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("brain 0 did not take the store's timers in time")
        time.sleep(0.1)
