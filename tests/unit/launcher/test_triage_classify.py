"""triage's pure classifiers: fixture facts in, findings out, one class at a time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airig.launcher.views.triage import ContainerFacts, Facts, Healthcheck, classify
from airig.launcher.views.triage.classify import flap_period
from airig.launcher.views.triage.facts import (
    AGENTS,
    FLAPPING,
    GPU_FALLBACK,
    MEMORY,
    MODEL_SYNC,
    STARTUP_CRASH,
    UNREACHABLE,
)

OLLAMA_HC = Healthcheck(interval_s=10, timeout_s=10, retries=12, start_period_s=30)  # 150 s
OLLAMA = ContainerFacts(
    stack="02-compute", service="ollama-gpu-nvidia", name="airig-compute-ollama-1",
    status="running", health="healthy", exit_code=0, gpu_requested=True,
    healthcheck=OLLAMA_HC,
)  # fmt: skip
WORKER = ContainerFacts(
    stack="03-agents", service="worker-cpu", name="airig-agents-worker-cpu-1",
    status="running", hostname="0123abcd4567",
)  # fmt: skip
REGISTERED = {"name": "rig-0123abcd4567", "alive": True, "gpus": [], "warnings": []}


def classes(facts: Facts) -> list[str]:
    return [f.cls for f in classify(facts)]


def test_a_healthy_kit_has_no_finding():
    facts = Facts(
        containers=(OLLAMA, WORKER),
        ollama_ps={OLLAMA.name: ({"name": "qwen", "size": 100, "size_vram": 100},)},
        workers=(REGISTERED,),
        bad_models=(),
    )
    assert classify(facts) == []


def test_docker_down_is_one_finding_that_says_so():
    [finding] = classify(Facts(unreachable=(("Docker", "the Docker daemon is not reachable"),)))
    assert finding.cls == UNREACHABLE
    assert finding.evidence == ("the Docker daemon is not reachable",)
    assert "systemctl start docker" in finding.action


def test_crash_loop_carries_exit_code_restarts_and_last_log_lines():
    log = tuple(f"line {n}" for n in range(10)) + ("Error: model file not found",)
    crashed = replace(
        OLLAMA, status="restarting", health="", exit_code=1, restart_count=7, log_tail=log
    )
    [finding] = classify(Facts(containers=(crashed,)))
    assert finding.cls == STARTUP_CRASH
    assert finding.evidence[0] == "state restarting, exit code 1, restart count 7"
    assert finding.evidence[-1] == "log: Error: model file not found"
    assert "logs ollama-gpu-nvidia" in finding.action


def test_unhealthy_is_a_crash_with_the_healthcheck_output():
    sick = replace(OLLAMA, health="unhealthy", health_log=("", "connection refused"))
    [finding] = classify(Facts(containers=(sick,)))
    assert finding.cls == STARTUP_CRASH
    assert "health: connection refused" in finding.evidence


def test_restarts_before_the_window_are_old_news_within_it_a_crash():
    assert classify(Facts(containers=(replace(OLLAMA, restart_count=2),))) == []
    [finding] = classify(Facts(containers=(replace(OLLAMA, restart_count=2, starts=(9.0,)),)))
    assert finding.cls == STARTUP_CRASH


def test_an_init_container_that_exited_zero_is_fine():
    init = replace(OLLAMA, service="ollama-init", status="exited", health="", exit_code=0)
    assert classify(Facts(containers=(init,))) == []


@pytest.mark.parametrize(
    ("starts", "period"),
    [
        ((0, 150, 300, 452), 150),  # steady
        ((452, 0, 300, 150), 150),  # order does not matter
        ((0, 150), None),  # one gap is no cadence
        ((0, 10, 300, 310), None),  # bursts, not a cadence
        ((5, 5, 5), None),  # same second: no period
    ],
)
def test_flap_period_reads_a_steady_cadence_only(starts, period):
    assert flap_period(starts) == period


def test_flapping_at_the_healthcheck_budget_says_both_figures_and_points_at_start_period():
    flapping = replace(OLLAMA, restart_count=3, starts=(1000, 1150, 1300, 1450))
    found = {f.cls: f for f in classify(Facts(containers=(flapping,)))}
    finding = found[FLAPPING]
    assert finding.evidence[0] == (
        "restarts every 150s (4 starts); healthcheck budget 150s = start_period 30s "
        "+ interval 10s × retries 12"
    )
    assert "start_period" in finding.action and "02-compute/compose.yaml" in finding.action
    assert STARTUP_CRASH in found  # the restarts themselves, with their exit code


def test_a_crash_loop_at_dockers_backoff_cadence_is_a_crash_not_flapping():
    """Docker's restart delay doubles to a 1 min cap: a crash loop's starts become steady,
    but the container is restarting, not up, between them."""
    looping = replace(OLLAMA, status="restarting", health="", exit_code=3, restart_count=9,
                      starts=(0, 61, 122, 183))  # fmt: skip
    assert classes(Facts(containers=(looping,))) == [STARTUP_CRASH]


def test_a_crash_loop_caught_running_on_a_slow_host_is_a_crash_not_flapping():
    """Each start takes ~2 s on a loaded host, so the loop's starts are steady, and triage
    may catch it in the instant it runs; its runs end in exit 3 at once (CI saw it as
    flapping)."""
    starts = (0.0, 2.0, 4.0, 6.0, 8.0)
    looping = replace(OLLAMA, status="running", health="", exit_code=0, restart_count=4,
                      starts=starts, dies=tuple((t + 0.1, 3) for t in starts[:-1]))  # fmt: skip
    assert classes(Facts(containers=(looping,))) == [STARTUP_CRASH]


def test_a_service_killed_after_staying_up_most_of_the_period_still_flaps():
    starts = (0.0, 1800.0, 3600.0, 5400.0)
    flaps = replace(OLLAMA, starts=starts, dies=tuple((t + 1790, 137) for t in starts[:-1]))
    assert FLAPPING in classes(Facts(containers=(flaps,)))
    # a die with no start before it in the window, or clean exits, say nothing either way
    odd = replace(OLLAMA, starts=starts, dies=((-5.0, 1), (10.0, 0), (1810.0, 0)))
    assert FLAPPING in classes(Facts(containers=(odd,)))


def test_flapping_off_the_budget_points_at_a_wait_timeout():
    flapping = replace(OLLAMA, starts=(0, 1800, 3600, 5400))
    finding = next(f for f in classify(Facts(containers=(flapping,))) if f.cls == FLAPPING)
    assert "every 1800s" in finding.evidence[0] and "budget 150s" in finding.evidence[0]
    assert "does not match" in finding.action and "wait timeout" in finding.action


def test_oom_kill_is_memory_not_a_crash():
    killed = replace(OLLAMA, status="exited", exit_code=137, oom_killed=True, restart_count=1)
    [finding] = classify(Facts(containers=(killed,)))
    assert finding.cls == MEMORY
    assert finding.evidence == ("OOMKilled: true, exit code 137",)
    assert "OLLAMA_CONTEXT_LENGTH" in finding.action


def test_an_out_of_memory_log_line_is_memory_evidence():
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    comfy = replace(OLLAMA, service="comfyui-gpu-nvidia", log_tail=("started", line, "ok"))
    [finding] = classify(Facts(containers=(comfy,)))
    assert (finding.cls, finding.evidence) == (MEMORY, (f"log: {line}",))


def test_vram_nearly_full_on_a_gpu_is_memory_pressure():
    gpu = {"index": 0, "vram_total_mb": 6144, "vram_free_mb": 100}
    worker = {**REGISTERED, "gpus": [gpu], "resident_models": ["qwen"]}
    [finding] = classify(Facts(containers=(WORKER,), workers=(worker,)))
    assert finding.cls == MEMORY
    assert finding.evidence == ("GPU 0: 6044 of 6144 MB used (resident: qwen)",)


def test_ollama_on_a_gpu_with_no_vram_is_a_cpu_fallback():
    models = ({"name": "qwen", "size": 4_000_000, "size_vram": 0},)
    [finding] = classify(Facts(containers=(OLLAMA,), ollama_ps={OLLAMA.name: models}))
    assert finding.cls == GPU_FALLBACK
    assert finding.evidence == ("/api/ps: qwen size 4000000 size_vram 0",)


def test_ollama_without_a_gpu_on_cpu_is_expected():
    cpu = replace(OLLAMA, service="ollama-cpu", gpu_requested=False)
    models = ({"name": "qwen", "size": 4_000_000, "size_vram": 0},)
    assert classify(Facts(containers=(cpu,), ollama_ps={cpu.name: models})) == []


def test_comfyui_given_a_gpu_but_reporting_cpu():
    comfy = replace(OLLAMA, service="comfyui-gpu-nvidia", name="c1")
    devices = ({"name": "cpu", "type": "cpu"},)
    [finding] = classify(Facts(containers=(comfy,), comfyui_devices={"c1": devices}))
    assert finding.cls == GPU_FALLBACK
    assert finding.evidence == ("/system_stats: devices[0] cpu type cpu",)


def test_whisper_given_a_gpu_but_loaded_on_cpu():
    whisper = replace(
        OLLAMA, service="whisper-gpu-nvidia", env={"WHISPER__INFERENCE_DEVICE": "cpu"},
        log_tail=("Loading model small on device=cpu",),
    )  # fmt: skip
    [finding] = classify(Facts(containers=(whisper,)))
    assert finding.cls == GPU_FALLBACK
    assert finding.evidence == (
        "env: WHISPER__INFERENCE_DEVICE=cpu",
        "log: Loading model small on device=cpu",
    )


def test_a_model_that_failed_verify_is_model_sync_with_the_repair_command():
    row = {"service": "whisper", "model": "Systran/faster-whisper-small", "size": 0,
           "present": True, "error": "model.bin is empty"}  # fmt: skip
    [finding] = classify(Facts(bad_models=(row,)))
    assert finding.cls == MODEL_SYNC
    assert "model.bin is empty" in finding.evidence[0]
    assert "models pull -s whisper Systran/faster-whisper-small" in finding.action
    assert finding.check == "python start_services.py models verify -s whisper"


def test_a_running_worker_the_brain_does_not_know():
    log = ("brain refused: 401 invalid token",)
    lonely = replace(WORKER, log_tail=log)
    [finding] = classify(Facts(containers=(lonely,), workers=()))
    assert finding.cls == AGENTS
    assert "not registered" in finding.summary
    assert finding.evidence[-1] == "log: brain refused: 401 invalid token"


def test_a_gpu_worker_is_known_by_its_worker_name():
    gpu = replace(WORKER, service="worker-gpu0", env={"WORKER_NAME": "gpu0"})
    assert classify(Facts(containers=(gpu,), workers=({**REGISTERED, "name": "gpu0"},))) == []
    [finding] = classify(Facts(containers=(gpu,), workers=(REGISTERED,)))
    assert finding.evidence[0] == (
        "container airig-agents-worker-cpu-1 (worker name gpu0) is not in the brain's 1 workers"
    )


def test_a_cpu_worker_is_known_by_its_compose_slot():
    """A CPU worker names itself by its slot (`cpu-1`, airig/common/worker_names.py), not
    its container id: triage expects the same name (the whole-kit e2e found it calling a
    registered worker `not registered`)."""
    slot = replace(WORKER, env={"WORKER_SERVICE": "worker-cpu"})
    assert classify(Facts(containers=(slot,), workers=({**REGISTERED, "name": "cpu-1"},))) == []
    joined = replace(slot, env={"WORKER_SERVICE": "worker-cpu", "WORKER_NAME_PREFIX": "rig2-"})
    known = ({**REGISTERED, "name": "rig2-cpu-1"},)
    assert classify(Facts(containers=(joined,), workers=known)) == []
    [finding] = classify(Facts(containers=(slot,), workers=(REGISTERED,)))
    assert "(worker name cpu-1)" in finding.evidence[0]


def test_a_worker_the_plan_has_but_docker_does_not():
    expected = {"worker-cpu": 2, "worker-gpu0": 1}
    facts = Facts(containers=(WORKER,), workers=(REGISTERED,), expected_workers=expected)
    found = classify(facts)
    assert [f.summary for f in found] == [
        "worker-cpu: 1 of 2 containers exist",
        "worker-gpu0: 0 of 1 containers exist",
    ]


def test_workers_unknown_when_the_brain_is_down_gives_no_agent_finding():
    assert classify(Facts(containers=(WORKER,), workers=None)) == []


def test_a_silent_worker_and_a_thermal_pause():
    silent = {**REGISTERED, "alive": False, "last_heartbeat": 1.0}
    hot = {"name": "rig-gpu0", "alive": True, "thermal_blocked": True,
           "warnings": ["GPU 0 at 87°C: paused until 78°C"]}  # fmt: skip
    found = classify(Facts(containers=(WORKER,), workers=(silent, hot)))
    assert [f.cls for f in found] == [AGENTS, AGENTS]
    assert "silent" in found[0].summary
    assert found[1].evidence == ("GPU 0 at 87°C: paused until 78°C",)


def test_a_worker_that_stopped_cleanly_is_not_called_silent():
    """It deregistered (the brain's ``stopped``): whether its container should run is the
    container checks' business, not a silent-worker finding."""
    stopped = {**REGISTERED, "alive": False, "stopped": True, "last_heartbeat": 0.0}
    assert classify(Facts(containers=(WORKER,), workers=(stopped,))) == []


def test_every_finding_is_data_with_its_class():
    [finding] = classify(Facts(unreachable=(("the brain", "timed out"),)))
    data = finding.to_dict()
    assert data["class"] == UNREACHABLE
    assert set(data) == {"class", "service", "summary", "evidence", "action", "check", "rollback"}


IDLE = {**REGISTERED, "running": 0, "classes": ["llm"], "idle_limit_s": 930.0}


@pytest.mark.parametrize(
    ("fields", "flagged"),
    [
        ({"idle_s": 1200.0, "ready_for_it": 4}, True),
        ({"idle_s": 600.0, "ready_for_it": 4}, False),  # within the residency wait
        ({"idle_s": 1200.0, "ready_for_it": 0}, False),  # nothing for it to do
        ({"idle_s": 1200.0, "ready_for_it": 4, "running": 1}, False),  # busy
        ({"idle_s": 1200.0, "ready_for_it": 4, "thermal_blocked": True}, False),  # own finding
        ({"idle_s": 1200.0, "ready_for_it": 4, "alive": False}, False),  # silent instead
    ],
)
def test_a_registered_worker_idle_while_its_queue_waits(fields, flagged):
    found = [
        f
        for f in classify(Facts(containers=(WORKER,), workers=({**IDLE, **fields},)))
        if "claimed nothing" in f.summary
    ]
    assert bool(found) is flagged
    if flagged:
        assert found[0].cls == AGENTS
        assert "idle_s 1200 (limit 930), ready_for_it 4" in found[0].evidence[0]
