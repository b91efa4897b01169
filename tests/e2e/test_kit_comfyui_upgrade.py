"""ComfyUI across an image change, for real: `up` with one ComfyUI image, then another.

yanwk/comfyui-boot copies its bundled ComfyUI into /root only when
/root/ComfyUI/main.py is missing (runner-scripts/entrypoint.sh), and most tags declare
VOLUME /root; the stand-in does both. So the code that runs after the second `up` is
the second image's only when nothing outlives a container on /root, while models and
workflows must. Also: an older kit's /root volume is moved over once; comfy-cli (not
the fallback) downloads the manifest's model; a stop ends with SIGTERM, not SIGKILL.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
from pathlib import Path

import pytest
import requests

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "standins" / "comfyui"
BASE = "airig-test/base:bookworm"
FILES = "airig-e2e-comfy-files"  # the model file host, on ai-network
SIZE = 65536


def docker(*args: str, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, f"docker {args}: {done.stdout}{done.stderr}"
    return done.stdout


def build_standin(version: str) -> str:
    """The ComfyUI stand-in whose bundled code says ``version`` (layers shared)."""
    tag = f"airig-test/comfyui:{version}"
    docker("build", "-q", "--build-arg", f"BASE_IMAGE={BASE}",
           "--build-arg", f"COMFYUI_VERSION={version}", "-t", tag, str(STANDIN))  # fmt: skip
    return tag


def file_sha256(name: str, size: int) -> str:
    path = ROOT / "tests" / "standins" / "filehost" / "server.py"
    spec = importlib.util.spec_from_file_location("filehost", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.file_sha256(name, size))


def set_env(root: Path, key: str, value: str) -> None:
    """Change one key of the kit's .env (its generated secrets stay)."""
    lines = [ln for ln in (root / ".env").read_text().splitlines() if not ln.startswith(f"{key}=")]
    (root / ".env").write_text("\n".join([*lines, f"{key}='{value}'"]) + "\n")


def comfy_exec(script: str) -> str:
    return docker("exec", "airig-compute-comfyui-cpu-1", "sh", "-c", script)


def version() -> str:
    stats = requests.get("http://127.0.0.1:8188/system_stats", timeout=10).json()
    return str(stats["system"]["comfyui_version"])


def seed_old_volume() -> None:
    """An older kit's one volume on /root: a model and a workflow inside ComfyUI/."""
    docker("volume", "create", "airig-comfyui-data")
    docker("run", "--rm", "-v", "airig-comfyui-data:/root", BASE, "sh", "-c",
           "mkdir -p /root/ComfyUI/models/loras /root/ComfyUI/user/default/workflows"
           " /root/.local && echo old > /root/ComfyUI/models/loras/old.safetensors"
           " && echo '{}' > /root/ComfyUI/user/default/workflows/old.json"
           " && echo pip > /root/.local/keep")  # fmt: skip


@pytest.fixture
def file_host(kit):
    docker("network", "create", "ai-network", check=False)
    docker("rm", "-f", FILES, check=False)
    docker("run", "-d", "--name", FILES, "--network", "ai-network", "airig-test/filehost:test")
    yield f"http://{FILES}:8080"
    docker("rm", "-f", FILES, check=False)


def test_a_new_comfyui_image_runs_its_own_code_and_keeps_models_and_workflows(kit, file_host):
    v1, v2 = build_standin("v1"), build_standin("v2")
    url = f"{file_host}/files/tiny.safetensors?size={SIZE}"
    manifest = kit.root / "02-compute" / "comfyui" / "models.yaml"
    manifest.unlink()  # copy_kit hard-links: writing in place would change the checkout's
    manifest.write_text(
        "models:\n"
        f"  - {{url: '{url}', folder: checkpoints, filename: tiny.safetensors,"
        f" sha256: '{file_sha256('tiny.safetensors', SIZE)}', size: {SIZE}}}\n"
    )
    # Local images for this test: ComfyUI's v1 and v2 are built here, not in the registry
    # the other e2e tests pull from (tests/e2e/test_kit_pull.py covers that path).
    set_env(kit.root, "AIRIG_IMAGE_REGISTRY", "")
    set_env(kit.root, "OLLAMA_IMAGE", "airig-test/ollama:test")
    set_env(kit.root, "WHISPER_IMAGE_CPU", "airig-test/whisper:test")
    set_env(kit.root, "COMFYUI_IMAGE_CPU", v1)
    seed_old_volume()
    copies_before = comfyui_copies()

    first = kit.run("--profile", "cpu")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "ComfyUI: moved 2 files" in first.stdout, first.stdout
    assert version() == "v1"
    # comfy-cli downloaded the model: the init container said which downloader ran
    events = [json.loads(ln) for ln in docker("logs", "airig-compute-comfyui-init-1").splitlines()
              if ln.startswith("{")]  # fmt: skip
    tools = [(e["tool"], e["reason"]) for e in events if e["event"] == "downloader"]
    assert tools == [("comfy-cli", None)], events
    assert comfy_exec("cat /root/ComfyUI/models/loras/old.safetensors") == "old\n"
    comfy_exec("echo '{\"v\": 1}' > /root/ComfyUI/user/default/workflows/mine.json")

    set_env(kit.root, "COMFYUI_IMAGE_CPU", v2)
    second = kit.run("--profile", "cpu")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "ComfyUI: moved" not in second.stdout  # once
    assert version() == "v2"  # the new image's code, not the first one's copy
    workflows = comfy_exec("ls /root/ComfyUI/user/default/workflows").split()
    assert sorted(workflows) == ["mine.json", "old.json"]
    models = comfy_exec("ls /root/ComfyUI/models/checkpoints /root/ComfyUI/models/loras")
    assert "tiny.safetensors" in models and "old.safetensors" in models

    # init: true: the stop's SIGTERM reaches bash through the init, no SIGKILL (137)
    started = time.monotonic()
    docker("stop", "-t", "20", "airig-compute-comfyui-cpu-1")
    assert time.monotonic() - started < 15
    state = json.loads(docker("inspect", "airig-compute-comfyui-cpu-1"))[0]["State"]
    assert state["ExitCode"] != 137, state

    down = kit.run("down", "--volumes", "--keep-models")
    assert down.returncode == 0, down.stdout + down.stderr
    volumes = set(docker("volume", "ls", "--format", "{{.Name}}").split())
    assert {"airig-comfyui-models", "airig-comfyui-data"} <= volumes
    assert "airig-comfyui-user" not in volumes
    assert comfyui_copies() == copies_before  # no anonymous /root left behind


def comfyui_copies() -> set[str]:
    """Unused anonymous volumes holding a ComfyUI copy (what a `down` could leave)."""
    dangling = docker("volume", "ls", "-q", "--filter", "dangling=true").split()
    found = set()
    for volume in (v for v in dangling if len(v) == 64):
        out = docker("run", "--rm", "-v", f"{volume}:/v:ro", BASE, "sh", "-c",
                     "test -f /v/ComfyUI/main.py && echo yes || true")  # fmt: skip
        if out.strip() == "yes":
            found.add(volume)
    return found
