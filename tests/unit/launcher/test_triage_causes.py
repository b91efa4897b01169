"""triage's findings name one cause each, with evidence that shows it (issue 22 §5): a
`docker stop` is no crash, a healthcheck's access line is no evidence, a model that failed
verification because its service was down joins that service's finding, a suggestion names
only what exists, and the brain's active alerts are findings (triage never says "nothing
wrong" while one holds)."""

from __future__ import annotations

from dataclasses import replace

from airig.launcher.views.triage import ContainerFacts, Facts, classify
from airig.launcher.views.triage.collect import relevant_alerts
from airig.launcher.views.triage.facts import (
    AGENTS,
    MODEL_SYNC,
    SERVICE_DOWN,
    STARTUP_CRASH,
    STOPPED,
)

WHISPER = ContainerFacts(
    stack="02-compute", service="whisper-cpu", name="airig-compute-whisper-cpu-1",
    status="running", health="healthy", exit_code=0,
)  # fmt: skip
WORKER = ContainerFacts(
    stack="03-agents", service="worker-cpu", name="airig-agents-worker-cpu-1",
    status="running", hostname="0123abcd4567",
)  # fmt: skip
STOPPED_WHISPER = replace(
    WHISPER, status="exited", health="", exit_code=143, starts=(1000.0,), stops=(2000.0,)
)
SERVICE_DOWN_ALERT = {
    "kind": "service_down", "subject": "whisper", "fired_at": 1_700_000_000.0,
    "message": "3 probes in a row failed (ConnectionError: refused); "
    "run `python start_services.py triage whisper`",
}  # fmt: skip
VERIFY_FAILED = {
    "service": "whisper", "model": "Systran/faster-whisper-tiny", "size": None, "present": True,
    "error": "whisper model: /v1/models connection refused",
}  # fmt: skip
# what the kit's services write for each healthcheck: the stand-ins (http.server in a JSON
# line), uvicorn (speaches), Ollama's gin
ACCESS_LINES = (
    '{"time": "t", "service": "whisper-standin", "msg": "\\"GET /health HTTP/1.1\\" 200 -"}',
    'INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',
    '[GIN] 2025/01/02 - 10:00:00 | 200 |      41.5µs |       127.0.0.1 | GET      "/api/version"',
)


def test_a_docker_stop_is_a_stop_not_a_startup_crash():
    for code in (143, 0, 137):
        [finding] = classify(Facts(containers=(replace(STOPPED_WHISPER, exit_code=code),)))
        assert finding.cls == STOPPED, code
        assert finding.summary.startswith("whisper-cpu was stopped at ")
        assert finding.evidence[0].startswith(f"state exited, exit code {code} after a `stop`")
        assert "restart whisper-cpu" in finding.action


def test_a_stop_before_the_window_is_known_by_the_restart_policy_that_let_it_be():
    """Under `restart: unless-stopped` Docker starts again a container that exited by
    itself: one that stays exited was stopped."""
    earlier = replace(STOPPED_WHISPER, stops=(), restart_policy="unless-stopped")
    [finding] = classify(Facts(containers=(earlier,)))
    assert (finding.cls, finding.summary) == (STOPPED, "whisper-cpu was stopped, it did not crash")
    assert finding.evidence == (
        "state exited, exit code 143 and restart policy unless-stopped did not start it again",
    )
    failed = replace(earlier, exit_code=1)
    assert [f.cls for f in classify(Facts(containers=(failed,)))] == [STARTUP_CRASH]


def test_an_exit_without_a_stop_or_a_start_after_the_stop_is_still_a_crash():
    crashed = replace(STOPPED_WHISPER, stops=())
    assert [f.cls for f in classify(Facts(containers=(crashed,)))] == [STARTUP_CRASH]
    restarted_then_died = replace(STOPPED_WHISPER, starts=(1000.0, 3000.0))
    assert [f.cls for f in classify(Facts(containers=(restarted_then_died,)))] == [STARTUP_CRASH]
    oom = replace(STOPPED_WHISPER, exit_code=137, oom_killed=True)
    assert STOPPED not in [f.cls for f in classify(Facts(containers=(oom,)))]


def test_healthcheck_access_lines_are_not_evidence():
    crashed = replace(
        WHISPER, status="restarting", health="", exit_code=1, restart_count=3,
        log_tail=("loading model", "OSError: model.bin is truncated", *ACCESS_LINES),
    )  # fmt: skip
    [finding] = classify(Facts(containers=(crashed,)))
    assert finding.evidence == (
        "state restarting, exit code 1, restart count 3",
        "log: OSError: model.bin is truncated",
    )
    failed_request = 'INFO:     127.0.0.1:1 - "POST /v1/audio/transcriptions HTTP/1.1" 500'
    only_access = replace(crashed, log_tail=(*ACCESS_LINES, failed_request))
    [finding] = classify(Facts(containers=(only_access,)))
    assert finding.evidence[1:] == (f"log: {failed_request}",)


def test_a_model_that_failed_verify_while_its_service_was_down_joins_that_finding():
    [finding] = classify(Facts(containers=(STOPPED_WHISPER,), bad_models=(VERIFY_FAILED,)))
    assert finding.cls == STOPPED
    assert finding.evidence[-1].startswith("knock-on, models verify while whisper was down: ")
    assert "connection refused" in finding.evidence[-1]


def test_a_model_that_failed_verify_beside_a_running_service_is_its_own_finding():
    found = classify(Facts(containers=(WHISPER,), bad_models=(VERIFY_FAILED,)))
    assert [f.cls for f in found] == [MODEL_SYNC]


def test_an_active_alert_is_a_finding_even_when_docker_sees_nothing_wrong():
    """The issue: the brain fired service_down whisper and triage said nothing wrong."""
    [finding] = classify(Facts(containers=(WHISPER,), alerts=(SERVICE_DOWN_ALERT,)))
    assert (finding.cls, finding.service) == (SERVICE_DOWN, "whisper-cpu")
    assert finding.evidence == (
        "brain alert service_down whisper since 2023-11-14T22:13:20.000Z: 3 probes in a row "
        "failed (ConnectionError: refused); run `python start_services.py triage whisper`",
        "docker: airig-compute-whisper-cpu-1 (whisper-cpu) running (healthy)",
    )
    assert "restart whisper-cpu" in finding.action


def test_an_alert_joins_the_finding_of_its_cause():
    found = classify(
        Facts(
            containers=(STOPPED_WHISPER,), alerts=(SERVICE_DOWN_ALERT,), bad_models=(VERIFY_FAILED,)
        )
    )
    [finding] = found
    assert finding.cls == STOPPED
    assert [e.split(" ")[0] for e in finding.evidence] == ["state", "brain", "knock-on,"]


def test_an_alert_for_a_service_with_no_container_suggests_up_not_restart():
    [finding] = classify(Facts(alerts=(SERVICE_DOWN_ALERT,)))
    assert (finding.cls, finding.service) == (SERVICE_DOWN, "whisper")
    assert "restart" not in finding.action and "up` creates" in finding.action


def test_a_silent_worker_whose_container_is_gone_is_not_restarted():
    silent = {"name": "rig-cpu-9", "alive": False, "last_heartbeat": 1.0, "host": "rig"}
    [finding] = classify(Facts(containers=(), workers=(silent,)))
    assert finding.cls == AGENTS
    assert "restart" not in finding.action
    assert "workers forget rig-cpu-9" in finding.action
    here = {**silent, "name": "rig-0123abcd4567"}
    [finding] = classify(Facts(containers=(replace(WORKER, status="exited"),), workers=(here,)))
    assert "`python start_services.py restart worker-cpu`" in finding.action


def test_a_worker_alert_joins_the_silent_worker_finding_or_stands_alone():
    alert = {"kind": "worker_down", "subject": "rig-cpu-9", "fired_at": 1.0, "message": "m"}
    silent = {"name": "rig-cpu-9", "alive": False, "last_heartbeat": 1.0}
    [finding] = classify(Facts(workers=(silent,), alerts=(alert,)))
    assert finding.evidence[-1].startswith("brain alert worker_down rig-cpu-9")
    [alone] = classify(Facts(alerts=(alert,)))
    assert (alone.cls, alone.service) == (AGENTS, "rig-cpu-9")
    assert "workers forget rig-cpu-9" in alone.action


def test_triage_of_one_service_keeps_the_alerts_about_it():
    queue = {"kind": "queue_depth", "subject": "queue", "fired_at": 1.0, "message": "m"}
    alerts = (SERVICE_DOWN_ALERT, queue)
    assert relevant_alerts(alerts, None, (), True) == alerts
    assert relevant_alerts(alerts, "whisper-cpu", (WHISPER,), False) == (SERVICE_DOWN_ALERT,)
    assert relevant_alerts(alerts, "whisper", (), False) == (SERVICE_DOWN_ALERT,)
    assert relevant_alerts(alerts, "brain", (), True) == (queue,)


def test_an_alert_for_an_exited_container_no_other_finding_explains_says_start_it():
    ended = replace(WHISPER, status="exited", health="", exit_code=0)  # no stop, no policy
    [finding] = classify(Facts(containers=(ended,), alerts=(SERVICE_DOWN_ALERT,)))
    assert finding.cls == SERVICE_DOWN
    assert finding.action.startswith("start it: `python start_services.py restart whisper-cpu`")


def test_a_store_the_brain_cannot_write_says_free_space_not_read_the_logs():
    full = {"kind": "store_unwritable", "subject": "store", "fired_at": 1.0,
            "message": "the store is full: 1.2 MiB free"}  # fmt: skip
    [finding] = classify(Facts(alerts=(full,)))
    assert finding.cls == AGENTS and "store_unwritable" in finding.summary
    assert "free space" in finding.action and "logs brain" not in finding.action
    assert "no restart needed" in finding.action
