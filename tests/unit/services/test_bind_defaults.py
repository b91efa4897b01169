"""Services listen on loopback unless compose says otherwise (issue 9).

A plain `python -m airig.brain` / `airig.services.gate` / `airig.services.infra serve` on a
laptop must not face the LAN; inside a container 0.0.0.0 is needed (other containers and the
published port reach it), so each compose service sets it explicitly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from airig.brain.settings import BrainSettings
from airig.services import gate

ROOT = Path(__file__).resolve().parents[3]


def test_the_brain_defaults_to_loopback(monkeypatch):
    monkeypatch.delenv("BRAIN_LISTEN_HOST", raising=False)
    assert BrainSettings().listen_host == "127.0.0.1"
    monkeypatch.setenv("BRAIN_LISTEN_HOST", "0.0.0.0")
    assert BrainSettings().listen_host == "0.0.0.0"


@pytest.mark.parametrize("env,host", [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_the_gate_binds_loopback_unless_told(monkeypatch, env, host):
    if env is None:
        monkeypatch.delenv("GATE_LISTEN_HOST", raising=False)
    else:
        monkeypatch.setenv("GATE_LISTEN_HOST", env)
    bound = []

    class Server:
        def __init__(self, address, handler):
            bound.append(address)

        def serve_forever(self):
            pass

        def server_close(self):
            pass

    monkeypatch.setattr(gate, "GateServer", Server)
    # not this test process's SIGTERM handler (tests/integration/test_service_stop.py)
    monkeypatch.setattr(gate, "stop_on_sigterm", lambda server: None)
    assert gate.main([]) == 0
    assert bound == [(host, gate.PORT)]


@pytest.mark.parametrize(
    "stack,service,variable",
    [
        ("01-infra", "files", "FILES_LISTEN_HOST"),
        ("02-compute", "models-ready", "GATE_LISTEN_HOST"),
        ("03-agents", "brain", "BRAIN_LISTEN_HOST"),
    ],
)
def test_compose_opens_each_service_inside_its_container(stack, service, variable):
    svc = yaml.safe_load((ROOT / stack / "compose.yaml").read_text())["services"][service]
    assert svc["environment"][variable] == "0.0.0.0"
    # the host side stays on AIRIG_BIND_ADDRESS (127.0.0.1 unless the user opens it)
    for port in svc.get("ports", []):
        assert port.startswith("${AIRIG_BIND_ADDRESS:-127.0.0.1}:")
