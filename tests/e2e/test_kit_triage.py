"""`triage` against the kit up for real (CPU profile, stand-ins): a healthy stack gives no
finding; then misbehaving containers of the kit's own projects (a crash loop, an OOM kill,
a worker that never registers, a truncated model file) each give the finding of their class
with the evidence."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

pytestmark = pytest.mark.docker
IMAGE = "airig/airig:e2e"  # has python3 (the kit's own image)
PROBE_INTERVAL_S = 3  # the brain's probes, shortened so its alert timers fire in the test


@pytest.fixture(scope="module")
def up_kit(tmp_path_factory, test_images):
    from conftest import Kit, copy_kit, force_clean, write_test_env

    force_clean()
    root = copy_kit(tmp_path_factory.mktemp("kit") / "airig")
    write_test_env(
        root, AIRIG_OLLAMA_MODELS="", AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny",
        AIRIG_CPU_WORKERS="1", BRAIN_PROBE_INTERVAL_S=str(PROBE_INTERVAL_S),
    )  # fmt: skip
    kit = Kit(root)
    done = kit.run("--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    yield kit
    kit.run("down", "--volumes", "--yes")
    force_clean()


def triage(kit, *args: str) -> tuple[int, dict]:
    done = kit.run("triage", "--json", *args, timeout=300)
    assert "Traceback" not in done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


def misbehave(project: str, service: str, *args: str) -> str:
    """A container of ``project`` as Compose labels it, running ``args``."""
    cmd = ["docker", "run", "-d", "--label", f"com.docker.compose.project={project}",
           "--label", f"com.docker.compose.service={service}", *args]  # fmt: skip
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def wait_for(predicate, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(1)


def inspect(cid: str, field: str) -> str:
    fmt = "{{" + field + "}}"
    return subprocess.run(
        ["docker", "inspect", "-f", fmt, cid], capture_output=True, text=True
    ).stdout.strip()


def test_healthy_kit_has_no_finding(up_kit):
    code, data = triage(up_kit)
    backends = data.pop("backends")
    assert (code, data) == (0, {"healthy": True, "findings": []})
    # the cpu profile: each compute service says cpu, with what keeps it there
    assert {b["service"]: (b["backend"], b["evidence"]) for b in backends} == {
        "comfyui-cpu": ("cpu", ["CLI_ARGS --cpu", "no GPU device"]),
        "ollama-cpu": ("cpu", ["no GPU device"]),
        "whisper-cpu": ("cpu", ["WHISPER__INFERENCE_DEVICE=cpu", "no GPU device"]),
    }


def test_crash_loop_oom_and_an_unregistered_worker(up_kit):
    crash = misbehave("airig-compute", "crasher", "--restart", "always", "--entrypoint", "sh",
                      IMAGE, "-c", "echo 'fatal: cannot open model'; exit 3")  # fmt: skip
    oom = misbehave("airig-compute", "hog", "--memory", "32m", "--memory-swap", "32m",
                    "--entrypoint", "python3", IMAGE, "-c",
                    "hog = []\nwhile True: hog.append(b'x' * (1 << 20))")  # fmt: skip
    misbehave("airig-agents", "worker-extra", "--entrypoint", "sleep", IMAGE, "600")
    wait_for(lambda: int(inspect(crash, ".RestartCount") or 0) >= 2)
    wait_for(lambda: inspect(oom, ".State.OOMKilled") == "true")

    code, data = triage(up_kit, "--no-verify")
    by_service = {f["service"]: f for f in data["findings"]}
    assert code == 1
    assert by_service["crasher"]["class"] == "startup crash"
    assert "restart count" in by_service["crasher"]["evidence"][0]
    assert "log: fatal: cannot open model" in by_service["crasher"]["evidence"]
    assert by_service["hog"]["class"] == "memory pressure / OOM"
    assert by_service["hog"]["evidence"][0].startswith("OOMKilled: true")
    assert by_service["worker-extra"]["class"] == "agents"
    assert "not registered" in by_service["worker-extra"]["summary"]


def brain_alerts(kit) -> list[tuple[str, str, str]]:
    import requests

    token = kit.env()["BRAIN_ADMIN_TOKEN"]
    answer = requests.get("http://127.0.0.1:8080/v1/events?limit=500",
                          headers={"Authorization": f"Bearer {token}"}, timeout=10)  # fmt: skip
    answer.raise_for_status()
    return [(e["event_type"], e.get("alert"), e.get("subject")) for e in answer.json()["events"]
            if e["event_type"].startswith("alert_")]  # fmt: skip


def test_the_brain_alerts_when_comfyui_stops_answering_and_when_it_is_back(up_kit):
    """Through the compose wiring: the brain probes comfyui:8188 over ai-network
    (BRAIN_PROBE_SERVICES); a healthy kit raises no service alert; ComfyUI gone raises
    service_down once; back, it clears once. AIRIG_ALERT_URLS would deliver both. Over the
    whole module (a healthy kit watched past its first probe rounds, the crash-loop and OOM
    containers beside it) exactly these two alerts are raised, no other."""
    time.sleep(5 * PROBE_INTERVAL_S)  # past BRAIN_PROBE_DOWN_AFTER (3) + 1 probe rounds
    assert brain_alerts(up_kit) == []
    name = subprocess.run(
        ["docker", "ps", "-q", "--filter", "label=com.docker.compose.project=airig-compute",
         "--filter", "label=com.docker.compose.service=comfyui-cpu"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert name, "the comfyui-cpu container"
    subprocess.run(["docker", "stop", name], check=True, capture_output=True)
    try:
        fired = ("alert_fired", "service_down", "comfyui")
        wait_for(lambda: fired in brain_alerts(up_kit), timeout=180)
    finally:
        subprocess.run(["docker", "start", name], check=True, capture_output=True)
    cleared = ("alert_cleared", "service_down", "comfyui")
    wait_for(lambda: cleared in brain_alerts(up_kit), timeout=180)
    time.sleep(2 * PROBE_INTERVAL_S)  # no other alert follows the clear
    assert sorted(brain_alerts(up_kit)) == sorted([fired, cleared])


def test_a_truncated_model_file_is_a_model_sync_finding(up_kit):
    """Last in the module: it breaks the model (the module's kit is thrown away after)."""
    label = "label=com.docker.compose.volume=whisper-models"
    listed = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", label],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    cut = (
        "import glob, os\nfor p in glob.glob('/m/**/model.bin', recursive=True): os.truncate(p, 10)"
    )
    subprocess.run(
        ["docker", "run", "--rm", "--user", "0", "-v", f"{listed[0]}:/m", "--entrypoint",
         "python3", IMAGE, "-c", cut],
        check=True, capture_output=True,
    )  # fmt: skip

    code, data = triage(up_kit)
    [finding] = [f for f in data["findings"] if f["class"] == "model sync / file visibility"]
    assert code == 1
    assert finding["service"] == "whisper"
    assert "Systran/faster-whisper-tiny" in finding["summary"]
    assert "models pull -s whisper Systran/faster-whisper-tiny" in finding["action"]
