"""`triage` at the command line (collectors replaced), and the container collector's reading
of the engine's attributes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from support import one_error, run_cli

import airig.launcher.views.triage.collect as collect
from airig.launcher.views.triage import Facts, Healthcheck
from airig.launcher.views.triage.render import HEALTHY

NS = 1_000_000_000


def test_docker_down_is_one_finding_and_exit_1(launcher_kit, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, None, "triage")
    assert code == 1
    assert "Traceback" not in out + err
    assert out.splitlines()[0] == "✘ 1. [cannot look] Docker: triage cannot look there"


def test_docker_down_as_json(launcher_kit, monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, None, "triage", "--json")
    data = json.loads(out)
    assert code == 1
    assert data["healthy"] is False
    assert [f["class"] for f in data["findings"]] == ["cannot look"]


def test_a_healthy_kit_says_so_in_one_line_and_exits_0(launcher_kit, monkeypatch, capsys):
    seen = {}

    def fake(settings, docker, service, since_s, verify):
        seen.update(service=service, since_s=since_s, verify=verify)
        return Facts()

    monkeypatch.setattr(collect, "collect", fake)
    code, out, _ = run_cli(monkeypatch, capsys, None, "triage", "ollama-cpu", "--since", "30m")
    assert (code, out.strip()) == (0, HEALTHY)
    assert seen == {"service": "ollama-cpu", "since_s": 1800, "verify": True}


@pytest.mark.parametrize("since", ["soon", "0m", "７d", "7d\x00", "9" * 400 + "s", "99999w"])
def test_a_bad_since_is_one_error(launcher_kit, monkeypatch, capsys, since):
    code, _, err = run_cli(monkeypatch, capsys, None, "triage", "--since", since)
    one_error(code, err, "--since")


def test_the_collector_reads_state_health_gpu_and_ports():
    attrs = {
        "RestartCount": 4,
        "State": {"Status": "running", "ExitCode": 0, "OOMKilled": False,
                  "Health": {"Status": "unhealthy", "Log": [{"Output": "refused\n"}]}},
        "Config": {
            "Labels": {"com.docker.compose.service": "ollama-gpu-nvidia"}, "Hostname": "abc",
            "Env": ["OLLAMA_HOST=0.0.0.0", "SECRET=x", "WHISPER__INFERENCE_DEVICE=cuda"],
            "Healthcheck": {"Test": ["CMD", "ollama", "list"], "Interval": 10 * NS,
                            "Timeout": 10 * NS, "Retries": 12, "StartPeriod": 30 * NS},
        },
        "HostConfig": {"DeviceRequests": [{"Driver": "nvidia", "Count": -1}],
                       "RestartPolicy": {"Name": "unless-stopped"}},
        "NetworkSettings": {"Ports": {"11434/tcp": [{"HostIp": "0.0.0.0", "HostPort": "1"}]}},
    }  # fmt: skip
    container = SimpleNamespace(name="c1", id="id1", attrs=attrs, logs=lambda tail: b"a\nb\n")
    events = [{"Action": "start", "time": 100}, {"Action": "stop", "time": 200},
              {"Action": "die", "time": 201, "Actor": {"Attributes": {"exitCode": "137"}}},
              {"status": "start", "time": 250},
              {"Action": "die", "time": 260, "Actor": {"Attributes": {"exitCode": "x"}}},
              {"Action": "die", "time": 270, "Actor": "not a mapping"}]  # fmt: skip
    docker = SimpleNamespace(sdk=lambda: SimpleNamespace(events=lambda **kw: iter(events)))
    facts = collect._facts("02-compute", container, docker, 3600)  # type: ignore[arg-type]
    assert (facts.service, facts.status, facts.health) == (
        "ollama-gpu-nvidia",
        "running",
        "unhealthy",
    )
    assert (facts.restart_count, facts.gpu_requested, facts.hostname) == (4, True, "abc")
    assert facts.env == {"OLLAMA_HOST": "0.0.0.0", "WHISPER__INFERENCE_DEVICE": "cuda"}
    assert facts.healthcheck == Healthcheck(10, 10, 12, 30)
    assert (facts.starts, facts.stops) == ((100.0, 250.0), (200.0,))
    assert facts.dies == ((201.0, 137), (260.0, -1), (270.0, -1))  # unreadable codes: -1
    assert facts.restart_policy == "unless-stopped"
    assert facts.log_tail == ("a", "b")
    assert facts.health_log == ("refused",)
    assert facts.published == {"11434/tcp": "http://127.0.0.1:1"}
