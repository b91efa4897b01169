"""The external tier through the kit's own Compose wiring (CPU profile, stand-ins): `up`
with AIRIG_ESCALATION=on starts the gateway with the key file as a Compose secret; a task
that fails twice on a real worker container goes brain → gateway → the provider stand-in
container on ai-network and its answer lands as the result. The key is in no other
container's environment or logs, and `escalations` shows the call and its cost."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import requests

pytestmark = pytest.mark.docker
PROVIDER = "airig-e2e-provider"
CONTROL = "http://127.0.0.1:18071"


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def escalating_kit(tmp_path_factory, test_images):
    from conftest import Kit, copy_kit, force_clean, write_test_env
    from standins.provider.control import DEFAULT_KEY

    force_clean()
    subprocess.run(["docker", "rm", "-f", PROVIDER], capture_output=True)
    root = copy_kit(tmp_path_factory.mktemp("kit") / "airig")
    (root / "secrets").mkdir()
    key_file = root / "secrets" / "provider.key"
    key_file.write_text(DEFAULT_KEY)
    key_file.chmod(0o600)
    write_test_env(
        root, AIRIG_OLLAMA_MODELS="", AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny",
        AIRIG_CPU_WORKERS="1", AIRIG_ESCALATION="on", AIRIG_GATEWAY_PROVIDER="openai",
        AIRIG_GATEWAY_MODEL="gpt-4.1-mini", AIRIG_GATEWAY_BASE_URL="http://provider:8071/v1",
        AIRIG_GATEWAY_KEY_FILE="secrets/provider.key",
    )  # fmt: skip
    kit = Kit(root)
    done = kit.run("--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    docker("run", "-d", "--name", PROVIDER, "--network", "ai-network", "--network-alias",
           "provider", "-p", "127.0.0.1:18071:8071", "airig-test/provider:test")  # fmt: skip
    end = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{CONTROL}/health", timeout=2).ok:
                break
        except requests.ConnectionError:
            pass
        assert time.monotonic() < end, "the provider stand-in did not answer"
        time.sleep(1)
    yield kit, DEFAULT_KEY
    subprocess.run(["docker", "rm", "-f", PROVIDER], capture_output=True)
    kit.run("down", "--volumes", "--yes")
    force_clean()


def test_a_task_that_fails_locally_is_answered_by_the_external_tier(escalating_kit):
    from standins.provider.control import ProviderControl

    kit, key = escalating_kit
    control = ProviderControl(CONTROL)
    control.answers(json.dumps({"answer": "answered outside"}))
    admin = {"Authorization": f"Bearer {kit.env()['BRAIN_ADMIN_TOKEN']}"}
    failing = {"fail": {"error_type": "boom", "message": "too hard locally"}}
    plan = {"name": "hard", "tasks": [
        {"id": "hard", "type": "noop", "task_class": "cpu", "escalate": "on_failure",
         "retry_count": 3, "payload": failing},
    ]}  # fmt: skip
    made = requests.post("http://127.0.0.1:8080/v1/plans", json=plan, headers=admin, timeout=30)
    assert made.status_code == 201, made.text
    plan_id = made.json()["id"]
    end = time.monotonic() + 240
    while True:
        got = requests.get(f"http://127.0.0.1:8080/v1/plans/{plan_id}", headers=admin, timeout=10)
        if got.json()["status"] in ("succeeded", "failed"):
            break
        assert time.monotonic() < end, got.text
        time.sleep(2)
    assert got.json()["status"] == "succeeded", got.text
    result = requests.get(f"http://127.0.0.1:8080/v1/plans/{plan_id}/tasks/hard/result",
                          headers=admin, timeout=10).json()  # fmt: skip
    assert result["output"] == {"text": "answered outside"}
    [call] = control.calls()
    assert call["auth"] == "ok"  # the gateway holds the key and sent it
    sent = json.dumps(call["body"])
    assert "attempt 1 on worker" in sent and "attempt 2 on worker" in sent

    # The CLI's view of the ledger.
    listed = kit.run("escalations", timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "gpt-4.1-mini" in listed.stdout

    # The key: in the gateway's mounted secret only, in no environment, log or inspect.
    names = docker("ps", "-a", "--format", "{{.Names}}").split()
    kit_containers = [n for n in names if n.startswith("airig-")]
    gateway = [n for n in kit_containers if "gateway" in n]
    assert gateway, names
    for name in kit_containers:
        assert key not in docker("inspect", name), name
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
        assert key not in logs.stdout + logs.stderr, name
    # the key file is mounted into the gateway alone (its environment is in inspect above)
    for name in kit_containers:
        mounted = "provider.key" in docker("inspect", "-f", "{{json .Mounts}}", name)
        assert mounted == (name in gateway), name
