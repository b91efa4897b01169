"""Following init containers' logs during `up`: live, only this run's, whole lines."""

from __future__ import annotations

import queue
import threading
import time
from datetime import UTC, datetime

import docker.errors

from airig.launcher.lifecycle.init_logs import InitLogs, started_at


def iso(ts: float) -> str:
    """Docker's StartedAt format: nanoseconds and a Z."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


class FakeContainer:
    def __init__(self, service: str, chunks: list, started: float | None, project="airig-compute"):
        self.id = f"id-{service}"
        self.name = f"{project}-{service}-1"
        self.labels = {"com.docker.compose.project": project, "com.docker.compose.service": service}
        self.attrs = {"State": {"StartedAt": iso(started) if started else "0001-01-01T00:00:00Z"}}
        self._chunks = chunks  # bytes, or threading.Event to wait for before going on
        self.since_asked: float | None = None

    def start(self, when: float) -> None:
        self.attrs["State"]["StartedAt"] = iso(when)

    def logs(self, stream: bool, follow: bool, since: float):
        assert stream and follow
        self.since_asked = since
        for chunk in self._chunks:
            if isinstance(chunk, threading.Event):
                assert chunk.wait(5), "test gate never opened"
            else:
                yield chunk


class FakeSdk:
    """The docker SDK's containers.list: the engine's list, then one inspect per
    container; one in ``gone`` is listed but removed before its inspect (NotFound, unless
    ``ignore_removed``, as the SDK does)."""

    def __init__(self, containers: list[FakeContainer]) -> None:
        self.containers = self
        self._all = containers
        self.fail = False
        self.gone: list[FakeContainer] = []

    def list(self, all: bool, filters: dict, ignore_removed: bool = False) -> list[FakeContainer]:
        if self.fail:
            raise ConnectionError("engine gone")
        wanted = filters["label"].split("=", 1)[1]
        found = []
        for c in [*self.gone, *self._all]:
            if c.labels["com.docker.compose.project"] != wanted:
                continue
            if c in self.gone:
                if not ignore_removed:
                    raise docker.errors.NotFound(f"No such container: {c.id}")
                continue
            found.append(c)
        return found


def drain(follower: InitLogs) -> list[str]:
    return list(follower.lines())


def test_started_at_parses_docker_nanoseconds_and_never_started() -> None:
    now = time.time()
    assert abs(started_at(FakeContainer("x", [], now)) - now) < 1e-3
    assert started_at(FakeContainer("x", [], None)) is None


def test_lines_arrive_while_up_still_runs() -> None:
    """The point of following: bars move before `compose up --wait` returns."""
    since = time.time()
    gate = threading.Event()
    late = FakeContainer("ollama-init", [b'{"event": "progress"}\n', gate, b"done\n"], None)
    follower = InitLogs(FakeSdk([late]), "airig-compute", ("ollama-init",), since, poll_s=0.02)
    got: queue.Queue = queue.Queue()
    consumer = threading.Thread(target=lambda: [got.put(x) for x in follower.lines()])
    follower.start()
    consumer.start()
    late.start(time.time())  # compose starts it once its server is healthy
    assert got.get(timeout=5) == '{"event": "progress"}'  # close() not called yet
    gate.set()
    follower.close()
    consumer.join(5)
    assert not consumer.is_alive()
    assert got.get_nowait() == "done"


def test_only_this_runs_containers_and_services_are_followed() -> None:
    since = time.time()
    earlier_run = FakeContainer("whisper-init", [b"old\n"], since - 120)
    other_service = FakeContainer("ollama", [b"server noise\n"], since + 1)
    other_project = FakeContainer("comfyui-init", [b"x\n"], since + 1, project="elsewhere")
    mine = FakeContainer("comfyui-init", [b"mine\n"], since + 1)
    sdk = FakeSdk([earlier_run, other_service, other_project, mine])
    follower = InitLogs(sdk, "airig-compute", ("whisper-init", "comfyui-init"), since).start()
    follower.close()
    assert drain(follower) == ["mine"]
    assert mine.since_asked is not None and mine.since_asked <= since


def test_lines_split_across_chunks_are_whole_and_a_last_partial_line_is_kept() -> None:
    since = time.time()
    container = FakeContainer("ollama-init", [b'{"a":', b" 1}\nsecond li", b"ne\ntail"], since)
    follower = InitLogs(FakeSdk([container]), "airig-compute", ("ollama-init",), since).start()
    follower.close()
    assert drain(follower) == ['{"a": 1}', "second line", "tail"]


def test_an_engine_error_ends_the_view_not_the_up() -> None:
    sdk = FakeSdk([])
    sdk.fail = True
    follower = InitLogs(sdk, "airig-compute", ("ollama-init",), time.time(), poll_s=0.01).start()
    time.sleep(0.05)
    follower.close()
    assert drain(follower) == []


def test_a_container_recreated_between_list_and_inspect_stops_no_other_one() -> None:
    """Compose recreating an init (its old id listed, gone on inspect) on every scan: the
    other init's lines still arrive (issue 35 §5)."""
    since = time.time()
    replaced = FakeContainer("comfyui-init", [b"old\n"], since)
    live = FakeContainer("ollama-init", [b'{"event": "pulled"}\n'], since)
    sdk = FakeSdk([live])
    sdk.gone.append(replaced)
    follower = InitLogs(sdk, "airig-compute", ("ollama-init", "comfyui-init"), since, poll_s=0.02)
    follower.start()
    follower.close()
    assert drain(follower) == ['{"event": "pulled"}']
