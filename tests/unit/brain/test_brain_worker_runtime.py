"""Worker runtime pieces without a network: heartbeat cancel, --check, settings."""

from __future__ import annotations

import json
import time

import pytest
from pydantic import ValidationError

from airig.common.protocol import Assignment, HeartbeatRequest
from airig.worker.__main__ import check
from airig.worker.heartbeat import CurrentAttempt, Heartbeat
from airig.worker.link import LeaseLost, Unregistered
from airig.worker.settings import WorkerSettings

TASK = Assignment(
    task_id=3, plan_id="p", key="k", name="k", type="noop", task_class="cpu", payload={},
    timeout_s=10, attempt=2, lease_id="L", lease_expires_at=0,
)  # fmt: skip


class FakeLink:
    def __init__(self, lease_error=None, heartbeat_error=None):
        self.lease_error, self.heartbeat_error = lease_error, heartbeat_error
        self.calls = []

    def lease_write(self, task_id, action, body, deadline_s):
        self.calls.append((task_id, action, body.attempt, body.lease_id))
        if self.lease_error:
            raise self.lease_error

    def still_unregistered(self, refused):
        return True  # one registration here: every 401 is for the token it holds

    def heartbeat(self, body, timeout):
        self.calls.append(("worker", "heartbeat"))
        if self.heartbeat_error:
            raise self.heartbeat_error


def make_heartbeat(tmp_path, link):
    current = CurrentAttempt()
    beat = Heartbeat(link, "w1", 1.0, current, HeartbeatRequest, tmp_path / "state.json")
    return beat, current


def test_a_refused_lease_renewal_cancels_the_attempt(tmp_path):
    beat, current = make_heartbeat(tmp_path, FakeLink(lease_error=LeaseLost("gone")))
    cancel = current.begin(TASK)
    beat.beat()
    assert cancel.is_set()
    assert beat.link.calls[0] == (3, "heartbeat", 2, "L")


def test_a_good_beat_renews_the_lease_and_writes_the_state_file(tmp_path):
    beat, current = make_heartbeat(tmp_path, FakeLink())
    cancel = current.begin(TASK)
    beat.beat()
    assert not cancel.is_set()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["ok"] and state["worker_id"] == "w1"


def test_an_unknown_worker_token_asks_for_registration(tmp_path):
    beat, _ = make_heartbeat(tmp_path, FakeLink(heartbeat_error=Unregistered("401")))
    beat.beat()
    assert beat.needs_register.is_set()
    assert not (tmp_path / "state.json").exists()


def settings(tmp_path, **env):
    return WorkerSettings(WORKER_STATE_FILE=str(tmp_path / "state.json"), **env)


def test_check_passes_only_after_a_recent_good_heartbeat(tmp_path):
    config = settings(tmp_path)
    path = str(config.state_file)  # the file the worker's settings name, as compose sets it
    assert check(60, path) == 1
    config.state_file.write_text(json.dumps({"ok": True, "at": time.time()}))
    assert check(60, path) == 0
    config.state_file.write_text(json.dumps({"ok": True, "at": time.time() - 120}))
    assert check(60, path) == 1
    config.state_file.write_text(json.dumps({"ok": False, "at": time.time()}))
    assert check(60, path) == 1


def test_worker_settings_parse_classes_and_gpu(tmp_path):
    config = settings(tmp_path, WORKER_CLASSES="llm, script", WORKER_GPU="1")
    assert config.classes == ["llm", "script"] and config.gpu_index == 1
    assert settings(tmp_path, WORKER_GPU="").gpu_index is None
    with pytest.raises(ValidationError):
        settings(tmp_path, WORKER_CLASSES="llm,quantum")
