"""The image choice as Compose runs it: the real `docker compose config` on the files and
env files `up` writes, on fixture hosts from 02-compute/images.yaml's real facts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support import write_env

from airig.launcher.compose.plan import GpuSlot, build_plan
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.images import choose_images, load_catalog
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import load_settings

pytestmark = pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0,
    reason="docker compose v2 plugin not installed",
)


@pytest.fixture
def kit(kit: Path) -> Path:
    """The shared kit copy with a .env: the example's with secrets, ComfyUI in low VRAM."""
    write_env(kit, COMFYUI_CLI_ARGS="--lowvram")
    return kit


def pascal(index: int) -> GpuInfo:
    return GpuInfo("nvidia", "NVIDIA GeForce GTX 1060 6GB", "discrete", index=index,
                   compute_capability="6.1", driver_version="535.183.01")  # fmt: skip


def compose_model(kit: Path, profile: str, gpus: list[GpuInfo]) -> dict:
    settings = load_settings(kit)
    images = choose_images(load_catalog(kit), profile, gpus, {})
    slots = [GpuSlot(g.index or 0, g.name) for g in gpus]
    plan = build_plan(settings, profile, slots, {"AIRIG_RENDER_GID": "993"}, images)
    Launcher(settings, None, None).write_generated(plan)
    stack = plan.stack("02-compute")
    cmd = ["docker", "compose", *sum((["-f", str(f)] for f in stack.files), [])]
    cmd += [*sum((["--env-file", str(e)] for e in stack.env_files), [])]
    cmd += ["--profile", profile, "-p", stack.project, "config", "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["services"]


def test_the_cpu_profiles_comfyui_gets_cpu_and_keeps_the_users_flags(kit):
    services = compose_model(kit, "cpu", [])
    assert services["comfyui-cpu"]["environment"]["CLI_ARGS"].split() == ["--cpu", "--lowvram"]
    catalog = load_catalog(kit)
    assert services["comfyui-cpu"]["image"] == catalog.cpu["comfyui"].image
    assert catalog.cpu["comfyui"].args.split() == ["--cpu"]


def test_the_seed_rig_runs_a_comfyui_built_for_pascal_on_its_gpus(kit):
    services = compose_model(kit, "gpu-nvidia", [pascal(i) for i in range(5)])
    comfy = services["comfyui-gpu-nvidia"]
    assert "cu126" in comfy["image"]
    assert comfy["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert comfy["environment"]["CLI_ARGS"].split() == ["--lowvram"]


def test_whisper_on_blackwell_runs_float16_on_pascal_int8_and_elsewhere_speaches_default(kit):
    """CTranslate2 4.5.0's int8 fails on compute capability 12.x, and float16 runs as float32
    on 6.1 (images.yaml env_rules)."""
    rtx5090 = GpuInfo("nvidia", "NVIDIA GeForce RTX 5090", "discrete", index=0,
                      compute_capability="12.0", driver_version="570.124.06")  # fmt: skip
    whisper = compose_model(kit, "gpu-nvidia", [rtx5090])["whisper-gpu-nvidia"]
    assert whisper["environment"]["WHISPER__COMPUTE_TYPE"] == "float16"
    assert whisper["image"].endswith(":0.8.3-cuda-12.6.3")
    seed = compose_model(kit, "gpu-nvidia", [pascal(0)])["whisper-gpu-nvidia"]
    assert seed["environment"]["WHISPER__COMPUTE_TYPE"] == "int8"
    assert seed["image"].endswith(":0.8.3-cuda-12.4.1")
    rtx3060 = GpuInfo("nvidia", "NVIDIA GeForce RTX 3060", "discrete", index=0,
                      compute_capability="8.6", driver_version="550.144.03")  # fmt: skip
    ampere = compose_model(kit, "gpu-nvidia", [rtx3060])["whisper-gpu-nvidia"]
    assert ampere["environment"]["WHISPER__COMPUTE_TYPE"] == "default"


def test_a_service_no_image_fits_runs_its_cpu_image_without_the_gpu(kit):
    kepler = GpuInfo("nvidia", "Tesla K80", "discrete", index=0, compute_capability="3.7",
                     driver_version="470.256.02")  # fmt: skip
    services = compose_model(kit, "gpu-nvidia", [kepler])
    comfy = services["comfyui-gpu-nvidia"]
    assert comfy["image"] == load_catalog(kit).cpu["comfyui"].image
    assert "deploy" not in comfy
    assert comfy["environment"]["CLI_ARGS"].split() == ["--cpu", "--lowvram"]
    assert services["comfyui-gpu-nvidia"]["networks"]["ai"]["aliases"] == ["comfyui"]


def test_compose_in_a_stack_folder_sees_what_up_used(kit):
    """README: after `up`, `cd 02-compute && docker compose logs -f` works by hand."""
    compose_model(kit, "gpu-nvidia", [pascal(0)])
    done = subprocess.run(
        ["docker", "compose", "config", "--format", "json"],
        cwd=kit / "02-compute",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)
    assert model["name"] == "airig-compute"
    assert "cu126" in model["services"]["comfyui-gpu-nvidia"]["image"]
    assert "comfyui-cpu" not in model["services"]  # the profile `up` used, not every one


@pytest.mark.parametrize(
    "secret", ["plain", "it's", 'a"b', "dollar$$HOME", "back\\slash", "mixed'$$\"\\"]
)
def test_the_stack_folder_reads_every_value_as_up_did(kit, secret):
    """The folder's .env is written by airig: a secret with quotes, escapes or dollars
    must reach Compose by hand exactly as it reached it through `up`'s --env-file."""
    env = (kit / ".env").read_text().replace("BRAIN_ADMIN_TOKEN=s3cret", "")
    (kit / ".env").write_text(env + f'BRAIN_ADMIN_TOKEN="{_dq(secret)}"\n')
    settings = load_settings(kit)
    plan = build_plan(settings, "cpu", [], None, choose_images(load_catalog(kit), "cpu", [], {}))
    Launcher(settings, None, None).write_generated(plan)
    stack = plan.stack("03-agents")
    as_up = ["docker", "compose", *sum((["-f", str(f)] for f in stack.files), [])]
    as_up += [*sum((["--env-file", str(e)] for e in stack.env_files), [])]
    as_up += ["--profile", "cpu", "-p", stack.project, "config", "--format", "json"]
    by_hand = ["docker", "compose", "config", "--format", "json"]
    tokens = []
    for cmd in (as_up, by_hand):
        done = subprocess.run(cmd, cwd=kit / "03-agents", capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        tokens.append(
            json.loads(done.stdout)["services"]["brain"]["environment"]["BRAIN_ADMIN_TOKEN"]
        )
    assert tokens[0] == tokens[1]
    assert "s3cret" not in tokens[1]


def _dq(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def test_down_removes_what_up_wrote_for_the_stack_folders(kit):
    settings = load_settings(kit)
    compose_model(kit, "gpu-nvidia", [pascal(0)])
    env_dir = kit / ".airig" / "env"
    assert sorted(p.name for p in env_dir.iterdir()) == [
        "01-infra.env", "02-compute.env", "03-agents.env"
    ]  # fmt: skip
    assert oct((env_dir / "03-agents.env").stat().st_mode & 0o777) == "0o600"

    class Engine:
        def down(self, stack):
            pass

        def remove_network(self, name):
            return f"network {name} removed"

    plan = build_plan(settings, "cpu", [])
    Launcher(settings, Engine(), None).down(plan, volumes=False, keep_models=False)
    # the folder goes with its files once empty; no stack folder keeps a link into it
    assert not env_dir.exists()
    assert not any(
        (kit / stack / ".env").is_symlink() for stack in ("01-infra", "02-compute", "03-agents")
    )
