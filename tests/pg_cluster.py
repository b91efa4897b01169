"""A throwaway PostgreSQL cluster for the tests: the real server, from Debian's binaries.

``Cluster.start(folder)`` runs ``initdb`` (no fsync) and ``postgres`` listening only on a
unix socket in ``folder`` (``-k folder -c listen_addresses=''``: no TCP port, so xdist
workers side by side never collide), with password authentication (scram-sha-256) for
its one superuser, so a wrong password is a real refusal. ``initdb`` and ``postgres``
refuse to run as root: as root (CI) both run as ``nobody``, in a folder made for it.
``Cluster.database()`` makes a fresh database (``TEMPLATE template0``) and gives its
SQLAlchemy URL. ``tests/conftest.py``'s ``pg_cluster`` (one per xdist worker) and
``pg_url`` (a database per test) fixtures use it.

Where the binaries are missing the fixture skips with ``MISSING``, a reason no rule of
``ALLOWED_SKIPS`` allows: CI installs Debian's ``postgresql`` package, and a CI run
without it is red.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MISSING = (
    "PostgreSQL's initdb and postgres are not installed (Debian: apt-get install postgresql): "
    "the store's tests on PostgreSQL did not run"
)
USER = "airig"
PASSWORD = "pg-test-password"
PORT = 5432  # only names the socket file (.s.PGSQL.5432) in the cluster's own folder


def binaries() -> Path | None:
    """The newest installed server's bin folder (Debian: /usr/lib/postgresql/<ver>/bin)."""
    found = [
        Path(path).parent
        for path in glob.glob("/usr/lib/postgresql/*/bin/postgres")
        if os.access(Path(path).parent / "initdb", os.X_OK)
    ]
    return max(found, key=lambda p: int(p.parent.name)) if found else None


def _as_owner() -> dict[str, object]:
    """subprocess arguments that run the server as ``nobody`` when the tests run as root."""
    if os.geteuid() != 0:
        return {}
    return {"user": "nobody", "group": pwd.getpwnam("nobody").pw_gid, "extra_groups": []}


@dataclass
class Cluster:
    bin: Path
    folder: Path
    process: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0  # initdb + start, measured
    _names: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "postgres.log"

    def url(self, database: str = "postgres", password: str = PASSWORD) -> str:
        return f"postgresql+psycopg://{USER}:{password}@/{database}?host={self.folder}&port={PORT}"

    @classmethod
    def start(cls, bin_dir: Path, folder: Path, durable: bool = False) -> Cluster:
        """``durable``: the server flushes its WAL at each commit as a real deployment does
        (the benchmarks); the tests' default trades that away for speed."""
        began = time.monotonic()
        cluster = cls(bin_dir, folder)
        owner = _as_owner()
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        if owner:
            os.chown(folder, pwd.getpwnam("nobody").pw_uid, int(owner["group"]))  # type: ignore[call-overload]
        pwfile = folder / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if owner:
            os.chown(pwfile, pwd.getpwnam("nobody").pw_uid, -1)
        subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(cluster.data), "-U", USER,
             f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8", "--locale=C",
             "--no-sync", "--no-instructions"],
            check=True, capture_output=True, timeout=120, cwd=folder, **owner,  # type: ignore[call-overload]
        )  # fmt: skip
        pwfile.unlink()
        fast = [] if durable else ["-c", "fsync=off", "-c", "full_page_writes=off",
                                   "-c", "synchronous_commit=off"]  # fmt: skip
        with cluster.log.open("wb") as log:
            cluster.process = subprocess.Popen(  # type: ignore[call-overload]
                [str(bin_dir / "postgres"), "-D", str(cluster.data), "-k", str(folder),
                 "-p", str(PORT), "-c", "listen_addresses=", *fast,
                 "-c", "max_connections=300"],
                stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True, **owner,
            )  # fmt: skip
        try:
            cluster._wait_ready()
        except BaseException:
            cluster.stop()
            raise
        cluster.started_s = time.monotonic() - began
        return cluster

    def _wait_ready(self, timeout_s: float = 60.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.log.read_text()[-2000:]}")
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def dsn(self, database: str = "postgres") -> str:
        return f"host={self.folder} port={PORT} user={USER} password={PASSWORD} dbname={database}"

    def database(self, template: str = "template0") -> str:
        """A new database, a copy of ``template`` (empty: ``template0``); its SQLAlchemy URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def drop(self, url: str) -> None:
        import psycopg

        name = url.split("@/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown: clients are cut off
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_cluster() -> Cluster | None:
    """A running cluster in a new folder of the machine's temporary folder (reachable by
    ``nobody``: pytest's own tmp folders are not); None when the binaries are missing."""
    bin_dir = binaries()
    if bin_dir is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="airig-pg-"))
    try:
        return Cluster.start(bin_dir, folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # start() stopped what it started
        raise
