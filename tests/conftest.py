"""Fixtures every test folder shares, and the skip rule CI enforces.

Plain helpers live in tests/support.py. The fixtures are all here, not in a
tests/unit/conftest.py: the e2e tests import their own conftest by name (`from conftest
import ...`), which only works while tests/e2e/conftest.py is the last conftest imported.

Skips: pytest prints every skip with its reason (`-ra` in pyproject.toml). With
AIRIG_STRICT_SKIPS=1 (.ci/run sets it) a skip whose reason no rule in ALLOWED_SKIPS allows
turns the run red: on CI a skipped test is a check that silently did not happen. Under
pytest-xdist the controller receives every worker's reports, so it counts the skips and
sets the exit status of the whole run.

Parallel runs: with pytest-xdist installed (the `test` extra) a plain `python -m pytest`
runs in parallel (set here rather than in addopts so that `-p no:xdist` and an
environment without xdist still work). The tests in tests/e2e/ share the engine's fixed
resources (host ports, Compose projects and volumes, networks, `force_clean()`): they run
in lanes (tests/e2e_lanes.py), each lane's modules in order on one worker of its own, the
lanes side by side, while the other workers take the rest (pytest_xdist_make_scheduler
below); a plain run starts one worker per CPU plus one per lane. A test marked `docker`
anywhere else is an error. `-n 0` runs everything in this process; so do `--pdb`, `--trace`
and `-s`.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import e2e_lanes
import pytest
from support import copy_kit, exec_context


# ------------------------------------------------------------------ skip rules
@dataclass(frozen=True)
class AllowedSkip:
    reason: str  # a regular expression the whole skip reason must match
    when: Callable[[], bool] = lambda: True  # the rule holds only while this is true


def _unprivileged() -> bool:
    return os.geteuid() != 0


ALLOWED_SKIPS = (
    # tests/unit/launcher/test_hardware_real_host.py: a runner with a GPU cannot show that a host
    # without one decides `cpu`; the fixture hosts of the hardware tests cover both cases.
    AllowedSkip(r"this host has an NVIDIA/AMD GPU: cpu is not expected"),
    # tests/unit/launcher/test_hardware_parts.py, tests/integration/test_compose_config.py: fixture
    # device nodes owned by two groups need chown, which only root may do. CI runs as root
    # and runs them; the rule covers a developer (or .ci/run with sudo) running unprivileged.
    AllowedSkip(r"two owning groups need chown \(root\)", when=_unprivileged),
    # tests/unit/launcher/test_hardware_hosts.py: the same for the fake /dev nodes' groups.
    AllowedSkip(r"the fake device nodes' groups need chown \(root\)", when=_unprivileged),
    # tests/integration/test_brain_store_full.py: the brain's store on a real 20 MB tmpfs
    # that fills up. CI runs as root and mounts it; unprivileged, the injected SQLite
    # errors of tests/unit/brain/test_brain_store_unwritable.py still cover the brain.
    AllowedSkip(r"a tmpfs mount needs root \(CAP_SYS_ADMIN\)", when=_unprivileged),
)
_skips: list[tuple[str, str]] = []  # (test id, reason) of every skip this run


def skip_allowed(reason: str) -> bool:
    return any(re.fullmatch(rule.reason, reason) and rule.when() for rule in ALLOWED_SKIPS)


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _skip_reason(report)))
    _finished(report)  # parallel runs, below


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:  # a module that skips itself as a whole
        _skips.append((report.nodeid, _skip_reason(report)))


def _disallowed() -> list[tuple[str, str]]:
    if os.environ.get("AIRIG_STRICT_SKIPS") != "1":
        return []
    return [(test, reason) for test, reason in _skips if not skip_allowed(reason)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _disallowed() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if len(_spans.spans) > 1:  # lanes beside the rest: how long each took
        terminalreporter.section("lanes (tests/e2e_lanes.py) and the rest")
        for line in _spans.lines():
            terminalreporter.line(line)
    disallowed = _disallowed()
    if disallowed:
        terminalreporter.section("skips no rule allows (AIRIG_STRICT_SKIPS=1)", red=True)
        for test, reason in disallowed:
            terminalreporter.line(f"{test}: {reason}", red=True)
        terminalreporter.line("fix the cause, or add a rule to ALLOWED_SKIPS (tests/conftest.py)")


# ------------------------------------------------------------------ parallel runs
ROOT = Path(__file__).resolve().parents[1]
E2E = e2e_lanes.E2E  # how their node ids start (relative to the checkout, pytest's rootdir)


def _xdist(config: pytest.Config) -> bool:
    return config.pluginmanager.hasplugin("xdist")


def _workers(config: pytest.Config) -> int:
    """One worker per CPU; when the run includes tests/e2e, one per e2e lane and one CPU
    fewer for the rest: a lane's worker mostly waits on its kit, but the kit's containers
    need CPU, and a kit starved by the unit tests times out and retries (the watch tests
    then see a worker_failures alert that a user's rig would not raise)."""
    from e2e_lanes import LANES

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    here = config.invocation_params.dir
    paths = [str((here / a.split("::", 1)[0]).resolve()) for a in config.args] or [str(ROOT)]
    e2e = str(ROOT / E2E)  # no trailing separator: Path drops it
    with_e2e = any(
        e2e.startswith(p + os.sep) or p == e2e or p.startswith(e2e + os.sep) for p in paths
    )
    return max((cpus or 1) - 1, 1) + len(LANES) if with_e2e else (cpus or 1)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns -n into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    if not _xdist(config) or hasattr(config, "workerinput"):  # no xdist, or an xdist worker
        return
    option = config.option
    needs_terminal = option.usepdb or option.trace or option.capture == "no"
    if option.numprocesses is None and not option.tx and not needs_terminal:
        option.numprocesses = _workers(config)
    if option.numprocesses and option.dist == "no":
        option.dist = "loadgroup"


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's loadgroup, and the tests under tests/e2e/ in one group per lane
    (tests/e2e_lanes.py), each group in collection order on one worker. By folder, not by
    the `docker` mark: the controller only sees node ids, and xdist's own `xdist_group`
    mark no longer reaches them on pytest 9.2 (pytest-xdist issue #1386)."""
    if config.option.dist not in ("load", "loadgroup"):
        return None
    from e2e_lanes import lane_for
    from xdist.scheduler import LoadGroupScheduling

    class DockerLanes(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(E2E):
                return f"{E2E}lane-{lane_for(nodeid).name}"
            return super()._split_scope(nodeid)

    return DockerLanes(config, log)


# AIRIG_CI_REST_DONE=<file>: .ci/run's repeated passes (the lower bounds, the store on
# PostgreSQL) wait for this file. The controller touches it when every test outside
# tests/e2e/ has finished: the passes then take the CPU the lanes' last kits leave, rather
# than waiting for them. (xdist gives a lane's worker other modules once its lane has two
# tests left, so that moment is often near the lanes' end: benchmarks/README.md.)
_rest: set[str] | None = None  # the node ids outside tests/e2e/ not finished yet


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    global _rest
    if _rest is None and os.environ.get("AIRIG_CI_REST_DONE"):
        _rest = {nodeid for nodeid in ids if not nodeid.startswith(E2E)}
        _rest_done_when_empty()


def _finished(report: pytest.TestReport) -> None:
    _spans.note(report)
    if _rest and report.when == "teardown":
        _rest.discard(report.nodeid)
        _rest_done_when_empty()


_spans = e2e_lanes.Spans()  # each lane's span and the rest's, printed at the end


def _rest_done_when_empty() -> None:
    if _rest is not None and not _rest:
        Path(os.environ["AIRIG_CI_REST_DONE"]).touch()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The e2e modules that start no kit first among the e2e tests (``e2e_lanes.EARLY``),
    in the e2e tests' own places in the run: every other test keeps its place."""
    from e2e_lanes import early_first

    places = [index for index, item in enumerate(items) if item.nodeid.startswith(E2E)]
    e2e = [items[index] for index in places]
    order = early_first([item.nodeid for item in e2e])
    for place, index in zip(places, order, strict=True):
        items[place] = e2e[index]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test on the real engine lives in tests/e2e/: the folder xdist runs on one worker."""
    if item.get_closest_marker("docker") and not item.nodeid.startswith(E2E):
        pytest.fail(f"marked docker outside {E2E}: move it there (tests/conftest.py)")


@pytest.fixture(autouse=True)
def own_rig_locks(request: pytest.FixtureRequest, tmp_path_factory, monkeypatch) -> None:
    """Outside tests/e2e/, `up` and `down` (fake engines, the kit's default prefix) take the
    rig lock (airig/launcher/lifecycle/rig_lock.py) in this run's own folder, not the
    machine's temporary folder: there it is the lock of the real e2e kit on the other xdist
    worker, and a unit test waited out each of that kit's `up`s (a CI run's unit tests
    crawled for minutes). The e2e kits run the launcher in subprocesses, which this leaves
    alone."""
    if request.node.nodeid.startswith(E2E):
        return
    from airig.launcher.lifecycle import rig_lock

    folder = tmp_path_factory.getbasetemp() / "rig-locks"
    folder.mkdir(exist_ok=True)
    monkeypatch.setattr(rig_lock, "LOCK_DIR", folder)


# ------------------------------------------------------------------ the kit
@pytest.fixture
def kit(tmp_path: Path) -> Path:
    """A copy of the kit's stack folders and .env.example (support.copy_kit), no .env."""
    return copy_kit(tmp_path / "kit")


@pytest.fixture
def launcher_kit(kit: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kit copy as the in-process launcher sees it: AIRIG_HOME points at it, no AIRIG_*
    or BRAIN_URL comes from the caller's shell, no real engine is reachable, and the
    consoles are wide enough that a message stays on one line."""
    import airig.launcher.console

    for key in [k for k in os.environ if k.startswith("AIRIG_") or k == "BRAIN_URL"]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AIRIG_HOME", str(kit))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.setattr(airig.launcher.console.console, "_width", 400)
    monkeypatch.setattr(airig.launcher.console.err_console, "_width", 400)
    return kit


# ------------------------------------------------------------------ executors
@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable:
    """``make_ctx(**overrides)``: an ExecContext over this test's tmp_path
    (support.exec_context: trusted, nothing reachable, 20 s, data/ and out/). The folders
    exist from the start, so a test can fill data/ before it builds a context."""
    for folder in ("data", "out"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return functools.partial(exec_context, tmp_path)


# ------------------------------------------------------------------ the brain
# Hosts the in-process brain answers for; any other host is unreachable.
BRAIN_HOSTS = ("brain.example.lan", "10.1.2.3", "127.0.0.1")


@pytest.fixture
def brain_calls() -> list[tuple[str, str]]:
    """(method, URL) of every request the launcher sent to the `brain` fixture."""
    return []


@pytest.fixture
def brain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, brain_calls) -> Iterator:
    """A real brain app (unit.brain_helpers settings, admin token "admin-secret-token");
    the launcher's HTTP calls (`join`'s checks and the CLI's brain client) to BRAIN_HOSTS
    reach it in this process. Yields its TestClient."""
    import requests
    from fastapi.testclient import TestClient
    from unit.brain_helpers import make_settings

    from airig.brain.api.app import create_app

    settings = make_settings(tmp_path / "brain", BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        lock = threading.Lock()

        def send(method, url, headers=None, **kwargs):
            parts = urlsplit(url)
            if parts.hostname not in BRAIN_HOSTS:
                raise requests.ConnectionError(f"no route to {parts.hostname}")
            brain_calls.append((method, url))
            kwargs.pop("timeout", None)
            if isinstance(kwargs.get("data"), bytes):  # requests' raw body is httpx's content
                kwargs["content"] = kwargs.pop("data")
            path = f"{parts.path}?{parts.query}" if parts.query else parts.path
            with lock:
                return client.request(method, path, headers=headers, **kwargs)

        monkeypatch.setattr(
            "airig.launcher.lifecycle.join.requests.get", lambda url, **kw: send("GET", url, **kw)
        )
        monkeypatch.setattr("airig.launcher.brain_client.requests.request", send)
        yield client


# ------------------------------------------------------------------ privileges
@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    """An empty folder the unprivileged user (support.unprivileged) can reach: pytest's
    tmp_path lies under a folder only the user running pytest may enter."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="airig-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


# ------------------------------------------------------------------ PostgreSQL
@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Which test runs now, and whether it is marked ``store`` where it must be
    (``pg_stores.check_marked``): set around its whole run, so a brain made by a fixture
    of a wider scope in its setup is checked too."""
    import pg_stores

    must = item.nodeid.startswith(pg_stores.MUST_MARK)
    marked = not must or item.get_closest_marker(pg_stores.MARK) is not None
    pg_stores.running = (item.nodeid, marked)
    try:
        return (yield)
    finally:
        pg_stores.running = None


@pytest.fixture(autouse=True)
def _pg_store_databases() -> Iterator[None]:
    """``AIRIG_TEST_STORE=postgresql`` (tests/pg_stores.py): the databases this test's
    brains used, dropped after it."""
    yield
    import pg_stores

    if pg_stores.wanted():
        pg_stores.drop_all()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator:
    """A throwaway PostgreSQL cluster (tests/pg_cluster.py), one per xdist worker: initdb
    and postgres on a unix socket in a folder of its own, stopped and removed at the end.
    Missing binaries skip with a reason ALLOWED_SKIPS does not allow: CI must run these."""
    from pg_cluster import MISSING, start_cluster

    cluster = start_cluster()
    if cluster is None:
        pytest.skip(MISSING)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster) -> Iterator[str]:
    """A fresh, empty database on ``pg_cluster`` for this test: its SQLAlchemy URL
    (``postgresql+psycopg://…?host=<socket folder>``), dropped after."""
    url = pg_cluster.database()
    try:
        yield url
    finally:
        pg_cluster.drop(url)
