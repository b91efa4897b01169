"""The init container's edge: every failure becomes one line, others still run."""

from __future__ import annotations

import errno
import io
import json

import pytest

from airig.common.errors import ProvisionError
from airig.provision.common import ModelReport
from airig.provision.events import Emitter
from airig.provision.runner import Mode, Service, describe, process, run
from airig.provision.verify import Verifier


def test_describe_gives_one_line_per_kind_of_failure() -> None:
    assert describe(ProvisionError("m: bad", "retry")) == "m: bad (retry)"
    assert describe(OSError(errno.ENOSPC, "No space", "/ollama/x")) == "disk full (/ollama/x)"
    assert describe(PermissionError(errno.EACCES, "Permission denied", "/x")) == (
        "Permission denied: /x"
    )
    assert describe(KeyError("k")) == "unexpected KeyError: 'k'"


class Scripted:
    """A provisioner whose models succeed or raise as scripted."""

    service, health_url = "ollama", "http://unused"

    def __init__(self, results: dict[str, Exception | None]) -> None:
        self.results = results
        self.verifier = Verifier(settle_seconds=0)
        self.calls: list[tuple[str, bool]] = []

    def ensure(self, model: str, force: bool) -> ModelReport:
        self.calls.append((model, force))
        if self.results[model] is not None:
            raise self.results[model]
        return ModelReport(model, 10, 1, cached=False)

    verify = ensure


def test_one_failure_does_not_stop_the_others() -> None:
    out = io.StringIO()
    scripted = Scripted({"a": OSError(errno.ENOSPC, "No space"), "b": None})
    failures = process(scripted, Mode.pull, ["a", "b"], Emitter("ollama", out))  # type: ignore[arg-type]
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert failures == 1
    assert [(e["event"], e["model"]) for e in events] == [("failed", "a"), ("verified", "b")]
    assert scripted.calls == [("a", True), ("b", True)]
    assert list(scripted.verifier.cache.models) == ["b"]


def test_bad_settings_fail_as_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRIG_SERVER_WAIT_SECONDS", "soon")
    out = io.StringIO()
    assert run(Service.ollama, Mode.ensure, emitter=Emitter("ollama", out)) == 1
    [line] = out.getvalue().splitlines()
    assert json.loads(line)["event"] == "failed"
