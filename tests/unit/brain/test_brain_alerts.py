"""Alerts fire once and clear once per kind, on an injected clock (airig/brain/ops/alerts.py)."""

from __future__ import annotations

import json

import brain_helpers as h
import pytest
from prometheus_client import generate_latest
from support import wait_until

from airig.brain.ops.alerts import Notice
from airig.brain.ops.notify import Notifier, parse_urls

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

T0 = 1000.0


@pytest.fixture
def brain(tmp_path):
    b = h.make_brain(
        tmp_path, AIRIG_ALERT_QUEUE_DEPTH=2, AIRIG_ALERT_FAILURES=2,
        AIRIG_ALERT_FAILURE_WINDOW_S=100, AIRIG_ALERT_GPU_TEMP_C=85,
    )  # fmt: skip
    yield b
    b.stop()


def said(brain, now):
    return [(n.kind, n.subject, n.fired) for n in brain.check_alerts(now)]


def alert_events(brain):
    with brain.db.read() as conn:
        rows = conn.execute(
            "SELECT body_json FROM events WHERE event_type LIKE 'alert_%' ORDER BY id"
        ).fetchall()
    return [json.loads(r["body_json"]) for r in rows]


def worker(brain, name, heartbeat, temperature=None):
    gpus = json.dumps([{"index": 0, "temperature_c": temperature}])

    def change(conn, outbox, now):
        conn.execute(
            """INSERT INTO workers (id, token_hash, classes_json, gpus_json, registered_at,
                   last_heartbeat) VALUES (?, 'x', '["cpu"]', ?, ?, ?)
               ON CONFLICT(id) DO UPDATE SET gpus_json = excluded.gpus_json,
                   last_heartbeat = excluded.last_heartbeat""",
            (name, gpus, heartbeat, heartbeat),
        )

    brain.write(change)


def metrics_text(brain) -> str:
    return generate_latest(brain.metrics.registry).decode()


def test_queue_depth_fires_once_and_clears_once(brain):
    h.submit(brain, [h.noop(f"t{i}") for i in range(3)], now=T0)
    assert said(brain, T0) == [("queue_depth", "queue", True)]
    assert said(brain, T0 + 1) == []  # still over: said once
    assert 'airig_alert_active{alert="queue_depth",subject="queue"} 1.0' in metrics_text(brain)
    h.claim(brain, T0 + 2)  # 2 left: at the threshold, no longer over it
    assert said(brain, T0 + 3) == [("queue_depth", "queue", False)]
    assert said(brain, T0 + 4) == []
    assert "airig_alert_active{" not in metrics_text(brain)
    assert 'airig_alerts_fired_total{alert="queue_depth"} 1.0' in metrics_text(brain)
    assert [e["event_type"] for e in alert_events(brain)] == ["alert_fired", "alert_cleared"]


def test_repeated_failures_of_a_task_type_and_on_a_worker(brain):
    plan = h.submit(brain, [h.noop("a", retry_count=5)], now=T0)
    for n in range(2):
        now = T0 + n * 10
        h.claim(brain, now, worker="w1")
        h.do(brain, plan, "a", "fail", now, error_type="boom", message="broke")
        if n == 0:
            assert said(brain, now) == []  # one failure is not "repeated"
        due = now + 9
        brain.write(lambda conn, outbox, _, due=due: h.leases.states.promote_due(conn, outbox, due))
    assert said(brain, T0 + 15) == [
        ("task_failures", "noop", True),
        ("worker_failures", "w1", True),
    ]
    assert said(brain, T0 + 50) == []
    # the window (100 s) passes the failures: each clears once
    assert said(brain, T0 + 120) == [
        ("task_failures", "noop", False),
        ("worker_failures", "w1", False),
    ]
    assert said(brain, T0 + 130) == []
    fired = alert_events(brain)[1]
    assert fired["worker_id"] == "w1" and fired["alert"] == "worker_failures"


def test_gpu_temperature_fires_once_and_clears_once(brain):
    worker(brain, "w1", heartbeat=T0, temperature=86.0)
    assert said(brain, T0) == [("gpu_temperature", "w1/gpu0", True)]
    worker(brain, "w1", heartbeat=T0 + 1, temperature=90.0)
    assert said(brain, T0 + 1) == []
    worker(brain, "w1", heartbeat=T0 + 2, temperature=70.0)
    assert said(brain, T0 + 2) == [("gpu_temperature", "w1/gpu0", False)]
    assert said(brain, T0 + 3) == []
    worker(brain, "w1", heartbeat=T0 + 4, temperature=None)  # no sensor: no alert
    assert said(brain, T0 + 4) == []


def test_worker_down_fires_once_and_clears_when_it_answers_again(brain):
    worker(brain, "w1", heartbeat=T0)
    assert said(brain, T0 + 5) == []  # within a lease (10 s)
    assert said(brain, T0 + 11) == [("worker_down", "w1", True)]
    assert said(brain, T0 + 30) == []
    worker(brain, "w1", heartbeat=T0 + 31)
    assert said(brain, T0 + 31) == [("worker_down", "w1", False)]
    events = alert_events(brain)
    assert [(e["event_type"], e["worker_id"]) for e in events] == [
        ("alert_fired", "w1"),
        ("alert_cleared", "w1"),
    ]


def test_alert_state_survives_a_restart(tmp_path):
    first = h.make_brain(tmp_path)
    worker(first, "w1", heartbeat=T0)
    assert [n.fired for n in first.check_alerts(T0 + 60)] == [True]
    first.stop()
    again = h.make_brain(tmp_path)
    assert again.check_alerts(T0 + 61) == []  # not fired a second time
    again.stop()


def test_alert_events_show_on_the_dashboard_feed(tmp_path):
    from fastapi.testclient import TestClient

    from airig.brain.api.app import create_app

    settings = h.make_settings(tmp_path, BRAIN_REAPER_INTERVAL_S=3600)
    with TestClient(create_app(settings)) as client:
        brain = client.app.state.brain
        brain.started_at = 0.0  # the injected clock is long before the real start
        worker(brain, "w1", heartbeat=T0)
        brain.check_alerts(T0 + 60)
        got = client.get(
            "/v1/events", params={"type": "alert_fired"},
            headers={"Authorization": "Bearer admin-secret-token"},
        ).json()  # fmt: skip
    assert [(e["alert"], e["subject"]) for e in got["events"]] == [("worker_down", "w1")]


def test_alert_urls_split_on_spaces_and_commas():
    assert parse_urls(" json://a:1/x, ntfy://topic  mailto://u:p@h ,") == [
        "json://a:1/x",
        "ntfy://topic",
        "mailto://u:p@h",
    ]


def test_notifier_queue_is_bounded_and_drops_the_oldest():
    notifier = Notifier(["x://"], max_pending=2, sender=lambda url: lambda notice: True)
    notices = [Notice("queue_depth", "queue", True, str(i), "t") for i in range(3)]
    notifier.send(notices)  # not started: nothing is delivered, the queue keeps 2
    assert [n.message for n in notifier.targets[0].pending] == ["1", "2"]


def test_a_bad_alert_url_is_skipped_without_naming_it(caplog):
    notifier = Notifier(["nonsense-secret"])
    assert notifier.targets == []
    assert "nonsense-secret" not in caplog.text


def test_a_restarted_brain_counts_silence_from_its_start(brain):
    worker(brain, "w1", heartbeat=T0)
    brain.started_at = T0 + 100  # the brain was down: no heartbeat could reach it
    assert said(brain, T0 + 105) == []
    assert said(brain, T0 + 111) == [("worker_down", "w1", True)]


def test_a_failing_target_is_retried_in_order_while_the_others_go_on():
    got: dict[str, list[str]] = {"up": [], "flaky": []}
    refusals = {"flaky": 2}

    def sender(url):
        def send(notice):
            if refusals.get(url, 0) > 0:
                refusals[url] -= 1
                return False
            got[url].append(notice.message)
            return True

        return send

    notifier = Notifier(["up", "flaky"], initial_s=0.01, cap_s=0.02, sender=sender)
    notifier.start()
    try:
        notifier.send(
            [Notice("worker_down", "w1", fired, m, "t") for fired, m in [(True, "a"), (False, "b")]]
        )
        wait_until(lambda: len(got["flaky"]) == 2, "the flaky target to catch up")
    finally:
        notifier.stop()
    assert got == {"up": ["a", "b"], "flaky": ["a", "b"]}  # each once, in order
    assert notifier.attempts == 6 and notifier.pending() == 0


def test_every_alert_kind_has_a_prometheus_rule():
    import re
    from pathlib import Path

    import yaml

    from airig.brain.ops.alerts import KINDS

    rules = yaml.safe_load(
        (Path(__file__).parents[3] / "03-agents/prometheus/alerts.yml").read_text()
    )
    exprs = [r["expr"] for group in rules["groups"] for r in group["rules"]]
    covered = {m for e in exprs for m in re.findall(r'alert="(\w+)"', e)}
    assert covered == set(KINDS)


def test_a_notice_quotes_outside_text_safely_for_every_receivers_markup(monkeypatch):
    """A joined rig named a worker with a newline, @everyone, Slack's <!channel> and a
    Markdown link; one hot heartbeat put that into the delivered title (issue 23 §5)."""
    import apprise

    from airig.brain.ops.alerts import Notice
    from airig.brain.ops.notify import apprise_sender

    sent: list[dict] = []
    monkeypatch.setattr(apprise.Apprise, "notify", lambda self, **kw: sent.append(kw) or True)
    hostile = "w1\n@everyone <!channel> [click](http://evil.example)\x07"
    notice = Notice("gpu_temperature", hostile, True, f"{hostile} at 99 C", "2026-11-24T00:00Z")
    assert apprise_sender("json://127.0.0.1:9/hook")(notice)
    [kw] = sent
    for text in (kw["title"], kw["body"]):
        assert "\n" not in text and "\x07" not in text
        assert "@everyone" not in text and "<!channel>" not in text and "](" not in text
        assert "w1" in text and "evil.example" in text  # still says what it was
    assert kw["body_format"] == apprise.NotifyFormat.TEXT


def test_a_worker_that_stopped_cleanly_is_not_down_anywhere(tmp_path):
    """`down` stops the workers before the brain, and a user may stop one worker: each
    deregisters (heartbeat RETIRED). No worker_down, then or later, and /v1/workers says
    stopped, not silent; its sibling that went quiet without a word still fires."""
    import time

    from fastapi.testclient import TestClient

    from airig.brain.api.app import create_app

    settings = h.make_settings(tmp_path, BRAIN_REAPER_INTERVAL_S=3600, BRAIN_LEASE_S=10)
    boot = {"Authorization": "Bearer bootstrap-secret-token"}
    admin = {"Authorization": "Bearer admin-secret-token"}
    with TestClient(create_app(settings)) as client:
        brain = client.app.state.brain
        tokens = {}
        for name in ("gone", "quiet"):
            answer = client.post("/v1/workers/register", headers=boot, json={"name": name})
            assert answer.status_code == 200, answer.text
            tokens[name] = {"Authorization": f"Bearer {answer.json()['token']}"}
        assert client.post("/v1/workers/deregister", headers=tokens["gone"]).status_code == 200
        later = time.time() + 60  # past the lease, and past it counted from the brain's start
        fired = [(n.kind, n.subject) for n in brain.check_alerts(later) if n.fired]
        assert fired == [("worker_down", "quiet")]
        listed = {w["name"]: w for w in client.get("/v1/workers", headers=admin).json()["workers"]}
    assert (listed["gone"]["alive"], listed["gone"]["stopped"]) == (False, True)
    assert listed["quiet"]["stopped"] is False
