"""`docker compose config` accepts every stack × profile (needs only the compose binary)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import write_env
from unit.hardware_fakes import FakeHost

from airig.launcher.compose.plan import GpuSlot, amd_host_env, build_plan, intel_host_env
from airig.launcher.hardware import detect
from airig.launcher.hardware.choice import detected_env, gpu_slots
from airig.launcher.settings import load_settings

PROFILES = ["cpu", "gpu-nvidia", "gpu-amd", "gpu-intel"]


def compose_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not compose_available(), reason="docker compose v2 plugin not installed"
)


def config(plan_stack) -> dict:
    cmd = ["docker", "compose"]
    for f in plan_stack.files:
        cmd += ["-f", str(f)]
    for e in plan_stack.env_files:
        cmd += ["--env-file", str(e)]
    for profile in plan_stack.profiles:  # one flag each, as python-on-whales passes them
        cmd += ["--profile", profile]
    cmd += [
        "-p",
        plan_stack.project,
        "config",
        "--format",
        "json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def kit(kit: Path) -> Path:
    """The shared kit copy with a .env: the example's, secrets filled in."""
    write_env(kit)
    return kit


@pytest.mark.parametrize("profile", PROFILES)
def test_every_stack_validates(kit, profile):
    gpus = [GpuSlot(0, gids=(993,)), GpuSlot(1, gids=(993,))] if profile != "cpu" else []
    plan = build_plan(load_settings(kit), profile, gpus, amd_host_env([993]))
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for stack in plan.stacks:
        model = config(stack)
        assert model["name"] == stack.project
        assert model["networks"]["ai"]["name"] == "ai-network"


@pytest.mark.parametrize("profile", PROFILES)
def test_compute_variants_per_profile(kit, profile):
    detected = intel_host_env([993]) if profile == "gpu-intel" else amd_host_env([993])
    plan = build_plan(load_settings(kit), profile, [], detected)
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    svcs = config(plan.stack("02-compute"))["services"]
    active = {
        n for n in svcs if n.split("-")[0] in ("ollama", "comfyui", "whisper") and "init" not in n
    }
    assert active == {f"ollama-{profile}", f"comfyui-{profile}", f"whisper-{profile}"}
    ollama = svcs[f"ollama-{profile}"]
    if profile == "gpu-nvidia":
        dev = ollama["deploy"]["resources"]["reservations"]["devices"][0]
        assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"]
        assert svcs["whisper-gpu-nvidia"]["image"].endswith("-cuda")
    elif profile == "gpu-amd":
        assert {d["source"] for d in ollama["devices"]} == {"/dev/kfd", "/dev/dri"}
        assert ollama["image"].endswith("-rocm")
        assert ollama["group_add"] == ["993"]  # the detected GID, from the generated overlay
        assert svcs["whisper-gpu-amd"]["image"].endswith("-cpu")  # no ROCm speaches
    elif profile == "gpu-intel":  # the render nodes alone; Ollama's Vulkan runner
        assert [d["source"] for d in ollama["devices"]] == ["/dev/dri"]
        assert ollama["environment"]["OLLAMA_VULKAN"] == "1"
        assert ollama["group_add"] == ["993"]
        assert svcs["comfyui-gpu-intel"]["image"].endswith(":xpu")
        assert svcs["whisper-gpu-intel"]["image"].endswith("-cpu")  # no Intel speaches
    else:
        assert "deploy" not in ollama and "devices" not in ollama
    # models-ready waits on every init, every init on its server
    assert set(svcs["models-ready"]["depends_on"]) == {
        "ollama-init",
        "comfyui-init",
        "whisper-init",
    }
    assert ollama["environment"]["OLLAMA_CONTEXT_LENGTH"] == "8192"


@pytest.mark.parametrize("count", [1, 2, 5])
def test_gpu_worker_layout(kit, count):
    gpus = [GpuSlot(i, "GTX 1060 6GB", 6 << 30) for i in range(count)]
    plan = build_plan(load_settings(kit), "gpu-nvidia", gpus)
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    svcs = config(plan.stack("03-agents"))["services"]
    workers = sorted(n for n in svcs if n.startswith("worker-gpu"))
    assert workers == sorted(f"worker-gpu{i}" for i in range(count))
    for i in range(count):
        w = svcs[f"worker-gpu{i}"]
        assert w["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == [str(i)]
        assert w["environment"]["WORKER_GPU"] == str(i)
        # the NVIDIA workers' build of the kit's image (OCR on the card: OCR_CUDA=1)
        assert w["image"] == svcs["brain"]["image"] + "-cuda"
        assert w["build"]["args"]["OCR_CUDA"] == "1"
        assert w["environment"]["OLLAMA_URL"] == f"http://ollama-gpu{i}:11434"
        o = svcs[f"ollama-gpu{i}"]
        assert o["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == [str(i)]
        assert o["environment"]["OLLAMA_KEEP_ALIVE"] == "-1"
        assert o["volumes"][0]["source"] == "ollama-models"


def test_brain_gpu_group_and_amd_layout(kit):
    """The seed's layout (brain on GPUs 0+3, workers on 1, 2, 4) and an AMD card, as
    Compose itself resolves them."""
    env = kit / ".env"
    env.write_text(env.read_text() + "\nAIRIG_BRAIN_GPUS=0,3\n")
    gpus = [GpuSlot(i, "GTX 1060 6GB", 6 << 30) for i in range(5)]
    plan = build_plan(load_settings(kit), "gpu-nvidia", gpus)
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    svcs = config(plan.stack("03-agents"))["services"]
    assert sorted(n for n in svcs if n.startswith("worker-") and n != "worker-cpu") == [
        "worker-brain", "worker-gpu1", "worker-gpu2", "worker-gpu4",
    ]  # fmt: skip
    for name in ("worker-brain", "ollama-brain"):
        ids = svcs[name]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
        assert ids == ["0", "3"]
    assert svcs["worker-brain"]["environment"]["WORKER_CLASSES"] == "llm,resource"
    # a Whisper on each worker GPU (issue 34 §3), none on the brain's cards, all reading
    # the one model store
    assert sorted(n for n in svcs if n.startswith("whisper-")) == [
        "whisper-gpu1", "whisper-gpu2", "whisper-gpu4",
    ]  # fmt: skip
    for i in (1, 2, 4):
        whisper = svcs[f"whisper-gpu{i}"]
        ids = whisper["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
        assert ids == [str(i)]
        assert whisper["volumes"][0]["source"] == "whisper-models"
        assert whisper["environment"]["WHISPER__INFERENCE_DEVICE"] == "cuda"
        assert "ports" not in whisper
        worker = svcs[f"worker-gpu{i}"]["environment"]
        assert worker["WHISPER_URL"] == f"http://whisper-gpu{i}:8000"
    assert svcs["worker-brain"]["environment"]["WHISPER_URL"] == "http://whisper:8000"

    env.write_text(env.read_text().replace("AIRIG_BRAIN_GPUS=0,3", ""))
    amd = build_plan(load_settings(kit), "gpu-amd", [GpuSlot(0, render_node="/dev/dri/renderD128")])
    for path, text in amd.generated.items():
        path.write_text(text)
    svcs = config(amd.stack("03-agents"))["services"]
    assert [d["source"] for d in svcs["ollama-gpu0"]["devices"]] == [
        "/dev/kfd",
        "/dev/dri/renderD128",
    ]
    assert svcs["worker-gpu0"]["environment"]["ROCR_VISIBLE_DEVICES"] == "0"
    # no ROCm speaches: an AMD rig's workers share the one (CPU) Whisper
    assert not [n for n in svcs if n.startswith("whisper-")]
    assert svcs["worker-gpu0"]["environment"]["WHISPER_URL"] == "http://whisper:8000"


@pytest.mark.parametrize(
    ("kfd_gid", "render_gid"),
    [(109, 109), (44, 993)],
    ids=["kfd-and-render-in-one-group", "kfd-in-its-own-group"],
)
def test_amd_hosts_device_groups_pass_compose(kit, tmp_path, kfd_gid, render_gid):
    """gpu-amd as `up` runs it, from detection on a fixture host to Compose's own check.
    Most ROCm hosts (Ubuntu) own /dev/kfd and /dev/dri/renderD* by one `render` group:
    a group_add naming that GID twice makes Compose reject the whole 02-compute file."""
    if os.geteuid() != 0 and kfd_gid != render_gid:
        pytest.skip("two owning groups need chown (root)")
    host = FakeHost(tmp_path / "host")
    host.pci("0000:03:00.0", 0x1002, 0x744C, driver="amdgpu", vram=24 << 30)
    host.kfd_node(
        1, simd_count=192, gfx_target_version=110000, location_id=3 << 8, drm_render_minor=128
    )
    host.amd_nodes(kfd_gid=kfd_gid, render_gid=render_gid)
    report = detect(host.sys, host.dev, nvml=None, amdsmi=None, docker_client=None, pci_ids=None)
    gids = {(host.dev / node).stat().st_gid for node in ("kfd", "dri/renderD128")}
    expected = [str(gid) for gid in sorted(gids)]
    assert len(expected) == (1 if kfd_gid == render_gid else 2)

    plan = build_plan(
        load_settings(kit), "gpu-amd", gpu_slots(report, "gpu-amd"), detected_env(report, "gpu-amd")
    )
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    compute = config(plan.stack("02-compute"))["services"]
    for name in ("ollama-gpu-amd", "comfyui-gpu-amd"):
        assert compute[name]["group_add"] == expected
        assert {d["source"] for d in compute[name]["devices"]} == {"/dev/kfd", "/dev/dri"}
    agents = config(plan.stack("03-agents"))["services"]
    for name in ("ollama-gpu0", "worker-gpu0"):
        assert agents[name]["group_add"] == expected
        assert [d["source"] for d in agents[name]["devices"]] == [
            "/dev/kfd",
            "/dev/dri/renderD128",
        ]
    for stack in plan.stacks:  # and the other stack is unaffected
        config(stack)


@pytest.mark.parametrize("profile", PROFILES)
def test_02_compute_passes_compose_without_the_launcher(kit, profile):
    """`docker compose --profile P config` by hand in 02-compute (images pinned in .env):
    the AMD variants map the devices and carry no GID list that .env could make repeat
    an item (an old .env still names both GIDs)."""
    env = kit / ".env"
    text = re.sub(r"^([A-Z_]*IMAGE[A-Z_]*)=$", r"\1=example/image:1", env.read_text(), flags=re.M)
    env.write_text(text + "\nAIRIG_VIDEO_GID=109\nAIRIG_RENDER_GID=109\n")
    cmd = ["docker", "compose", "--env-file", str(env), "--profile", profile, "config"]
    done = subprocess.run(
        [*cmd, "--format", "json"], cwd=kit / "02-compute", capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    assert all("group_add" not in service for service in services.values())
    if profile == "gpu-amd":
        for name in ("ollama-gpu-amd", "comfyui-gpu-amd"):
            assert {d["source"] for d in services[name]["devices"]} == {"/dev/kfd", "/dev/dri"}


HARDENING = ("cap_drop", "cap_add", "security_opt", "read_only", "tmpfs", "mem_limit", "pids_limit")


@pytest.mark.parametrize("profile", ["gpu-nvidia", "gpu-amd"])
def test_gpu_workers_inherit_the_workers_hardening_and_limits(kit, profile):
    """The generated per-GPU workers extend worker-cpu: as Compose resolves them, they run
    as hardened as it, with the limits set in .env."""
    env = kit / ".env"
    env.write_text(
        env.read_text() + "\nAIRIG_WORKER_MEM_LIMIT=300m\nAIRIG_WORKER_PIDS_LIMIT=99\n"
        "AIRIG_BRAIN_GPUS=1,2\n"
    )
    gpus = [GpuSlot(i, gids=(993,)) for i in range(3)]
    plan = build_plan(load_settings(kit), profile, gpus, amd_host_env([993]))
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    svcs = config(plan.stack("03-agents"))["services"]
    cpu = {key: svcs["worker-cpu"].get(key) for key in HARDENING}
    assert cpu["cap_drop"] == ["ALL"] and cpu["read_only"] is True
    assert (cpu["mem_limit"], cpu["pids_limit"]) == (str(300 << 20), 99)
    for name in ("worker-gpu0", "worker-brain"):
        assert {key: svcs[name].get(key) for key in HARDENING} == cpu, name
        assert "init" not in svcs[name] and "privileged" not in svcs[name]


KEY = "sk-compose-test-0123456789abcdef"


@pytest.mark.parametrize("profile", PROFILES)
def test_escalation_adds_the_gateway_alone_holding_the_key(kit, profile):
    """AIRIG_ESCALATION=on: Compose renders 03-agents' gateway, hardened like the brain,
    unpublished, with the key file as its secret; no other service gets the key or its
    file, and the brain gets the gateway's address and token. Off: no gateway."""
    gpus = [GpuSlot(0, gids=(993,))] if profile != "cpu" else []
    off = build_plan(load_settings(kit), profile, gpus, amd_host_env([993]))
    for path, text in off.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert "gateway" not in config(off.stack("03-agents"))["services"]

    key = kit / "secrets" / "provider.key"
    key.parent.mkdir()
    key.write_text(KEY)
    key.chmod(0o600)
    write_env(kit, AIRIG_ESCALATION="on", AIRIG_GATEWAY_PROVIDER="anthropic",
              AIRIG_GATEWAY_MODEL="claude-sonnet-5-5",
              AIRIG_GATEWAY_KEY_FILE="secrets/provider.key")  # fmt: skip
    plan = build_plan(load_settings(kit), profile, gpus, amd_host_env([993]))
    for path, text in plan.generated.items():
        path.write_text(text)
    model = config(plan.stack("03-agents"))
    services = model["services"]
    gateway = services["gateway"]
    assert gateway["image"] == services["brain"]["image"]
    assert gateway["command"] == ["python", "-m", "airig.gateway"]
    assert "ports" not in gateway
    assert gateway["networks"]["ai"]["aliases"] == ["gateway"]
    for hardening in ("cap_drop", "security_opt", "read_only", "tmpfs"):
        assert gateway[hardening] == services["brain"][hardening], hardening
    assert gateway["user"] == f"{os.getuid()}:{os.getgid()}"  # the key file's owner
    assert [s["source"] for s in gateway["secrets"]] == ["provider_key"]
    assert model["secrets"]["provider_key"]["file"] == str(key)
    env = gateway["environment"]
    assert env["AIRIG_GATEWAY_KEY_FILE"] == "/run/secrets/provider_key"
    assert (env["AIRIG_GATEWAY_PROVIDER"], env["AIRIG_GATEWAY_MODEL"]) == (
        "anthropic",
        "claude-sonnet-5-5",
    )
    brain = services["brain"]["environment"]
    assert brain["AIRIG_GATEWAY_URL"] == "http://gateway:8070"
    assert brain["AIRIG_GATEWAY_TOKEN"] == env["AIRIG_GATEWAY_TOKEN"] == "s3cret"
    for name, service in services.items():
        rendered = json.dumps(service)
        assert KEY not in rendered, name
        if name != "gateway":
            assert "provider_key" not in rendered and str(key) not in rendered, name
    for stack in plan.stacks:
        if stack.name != "03-agents":
            assert "gateway" not in config(stack)["services"]
