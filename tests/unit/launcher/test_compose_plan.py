from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from airig.launcher.compose.gpu_workers import GpuSlot, amd_group_add
from airig.launcher.compose.plan import (
    AMD_COMPUTE_SERVICES,
    StackPlan,
    amd_compute_overlay,
    amd_host_env,
    build_plan,
    plan_for_running,
)
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.images import choose_images, load_catalog
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import load_settings

ROOT = Path(__file__).resolve().parents[3]


def settings(tmp_path, env=""):
    (tmp_path / ".env").write_text(env)
    # build_plan reads the image catalog, and the shared Ollama's environment that the
    # per-GPU Ollamas repeat (02-compute/compose.yaml)
    (tmp_path / "02-compute").mkdir(exist_ok=True)
    for name in ("images.yaml", "compose.yaml"):
        shutil.copy(ROOT / "02-compute" / name, tmp_path / "02-compute" / name)
    return load_settings(tmp_path)


def test_stacks_in_order_with_profile_and_env(tmp_path):
    plan = build_plan(settings(tmp_path, "AIRIG_RIG_NAME=rig1\n"), "cpu", [])
    assert [s.name for s in plan.stacks] == ["01-infra", "02-compute", "03-agents"]
    assert [s.project for s in plan.stacks] == ["airig-infra", "airig-compute", "airig-agents"]
    host_env = tmp_path / ".airig" / "host.env"
    for s in plan.stacks:
        assert s.profiles == ("cpu",) and s.env_files == (tmp_path / ".env", host_env)
        assert s.files == (tmp_path / s.name / "compose.yaml",)
    # no GPU workers: the CPU workers take every class; they tell the brain their rig
    assert list(plan.generated) == [host_env]
    values = dict(line.split("=", 1) for line in plan.generated[host_env].splitlines())
    assert values["AIRIG_CPU_WORKER_CLASSES"] == "cpu,script,llm,resource"
    assert (values["AIRIG_RIG_NAME"], values["AIRIG_WORKER_NAME_PREFIX"]) == ("rig1", "")
    # every image variable compose interpolates has a value (02-compute/images.yaml)
    assert values["COMFYUI_IMAGE_CPU"] == "yanwk/comfyui-boot:cpu"
    assert values["COMFYUI_IMAGE_NVIDIA"] == "yanwk/comfyui-boot:cu130-slim-v2"
    assert values["OLLAMA_IMAGE_ROCM"] == "ollama/ollama:0.20.6-rocm"


def test_gpu_layout_one_worker_per_gpu_pinned(tmp_path):
    gpus = [GpuSlot(0, "GTX 1060"), GpuSlot(3, "GTX 1060")]
    plan = build_plan(settings(tmp_path), "gpu-nvidia", gpus)
    agents = plan.stack("03-agents")
    overlay = agents.files[1]
    services = yaml.safe_load(plan.generated[overlay])["services"]
    assert set(services) == {f"{kind}-gpu{i}" for kind in ("worker", "ollama", "whisper")
                             for i in (0, 3)}  # fmt: skip
    for name in ("worker-gpu3", "ollama-gpu3", "whisper-gpu3"):
        dev = services[name]["deploy"]["resources"]["reservations"]["devices"][0]
        assert dev == {"driver": "nvidia", "device_ids": ["3"], "capabilities": ["gpu"]}
    worker, ollama = services["worker-gpu3"], services["ollama-gpu3"]
    assert worker["environment"]["WORKER_GPU"] == "3"
    # each GPU worker drives its own Ollama, which never unloads on a timer, and its own
    # Whisper, whose loaded models it reports
    assert worker["environment"]["OLLAMA_URL"] == "http://ollama-gpu3:11434"
    assert worker["environment"]["WHISPER_URL"] == "http://whisper-gpu3:8000"
    assert worker["environment"]["WORKER_OWN_WHISPER"] == "1"
    assert worker["depends_on"] == {"ollama-gpu3": {"condition": "service_healthy"},
                                    "whisper-gpu3": {"condition": "service_healthy"}}  # fmt: skip
    assert ollama["environment"]["OLLAMA_KEEP_ALIVE"] == "${OLLAMA_KEEP_ALIVE:--1}"
    assert ollama["environment"]["OLLAMA_NOPRUNE"] == "1"
    assert ollama["networks"] == ["ai"]  # no `ollama` alias: that name is the shared one


def test_amd_layout_maps_one_render_node_and_host_gids(tmp_path):
    plan = build_plan(
        settings(tmp_path, "HSA_OVERRIDE_GFX_VERSION=10.3.0\nAIRIG_RIG_NAME=rig1\n"),
        "gpu-amd",
        [GpuSlot(0, render_node="/dev/dri/renderD129", gids=(44, 993))],
        amd_host_env([993, 44]),
    )
    overlay = plan.stack("03-agents").files[1]
    services = yaml.safe_load(plan.generated[overlay])["services"]
    for name in ("worker-gpu0", "ollama-gpu0"):
        assert services[name]["devices"] == ["/dev/kfd", "/dev/dri/renderD129"]
        assert services[name]["group_add"] == ["44", "993"]
    assert services["ollama-gpu0"]["environment"]["ROCR_VISIBLE_DEVICES"] == "0"
    assert services["ollama-gpu0"]["image"].startswith("${OLLAMA_IMAGE_ROCM")
    host_env = tmp_path / ".airig" / "host.env"
    assert "AIRIG_AMD_GIDS=44,993\n" in plan.generated[host_env]
    compute = plan.stack("02-compute")
    assert compute.env_files == (tmp_path / ".env", host_env)
    # the AMD groups come right after compose.yaml: a later overlay may still undo them
    amd_overlay = tmp_path / ".airig" / "compute.gpu-amd.yaml"
    assert compute.files[:2] == (tmp_path / "02-compute" / "compose.yaml", amd_overlay)
    assert yaml.safe_load(plan.generated[amd_overlay]) == {
        "services": {name: {"group_add": ["44", "993"]} for name in AMD_COMPUTE_SERVICES}
    }
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in plan.generated[tmp_path / ".airig" / "gpu-amd.env"]


@pytest.mark.parametrize(
    ("gids", "group_add"),
    [
        ([109, 109], ["109"]),  # kfd and the render nodes in `render`: the usual host
        ([109, 44, 109], ["44", "109"]),  # kfd in `video`: numbers sort, each once
        (["993", 44], ["44", "993"]),
        ([], []),
    ],
)
def test_amd_group_add_lists_each_gid_once(gids, group_add):
    assert amd_group_add(gids) == group_add
    overlay = yaml.safe_load(amd_compute_overlay(gids))["services"]
    assert overlay == {name: {"group_add": group_add} for name in AMD_COMPUTE_SERVICES}
    assert amd_host_env(int(g) for g in gids) == (
        {"AIRIG_AMD_GIDS": ",".join(group_add)} if group_add else {}
    )


def test_amd_per_gpu_services_repeat_no_gid_and_need_none_without_detection(tmp_path):
    same = [GpuSlot(0, gids=(109,)), GpuSlot(1, gids=(109,))]
    env = settings(tmp_path, "AIRIG_BRAIN_GPUS=0,1\n")
    plan = build_plan(env, "gpu-amd", same, amd_host_env([109]))
    services = yaml.safe_load(plan.generated[plan.stack("03-agents").files[1]])["services"]
    assert services["ollama-brain"]["group_add"] == ["109"]  # two cards, one group
    plan = build_plan(settings(tmp_path), "gpu-amd", [GpuSlot(0)])
    services = yaml.safe_load(plan.generated[plan.stack("03-agents").files[1]])["services"]
    assert "group_add" not in services["ollama-gpu0"]  # no detection: root needs none
    compute_overlay = plan.generated[tmp_path / ".airig" / "compute.gpu-amd.yaml"]
    assert yaml.safe_load(compute_overlay)["services"]["ollama-gpu-amd"] == {"group_add": []}


def test_the_amd_overlay_covers_exactly_the_services_mapping_amd_devices():
    """The checked-in file maps the devices and adds no group (the overlay does), so its
    list cannot repeat a GID whatever .env says."""
    compose = yaml.safe_load((ROOT / "02-compute" / "compose.yaml").read_text())
    services = compose["services"]
    mapping = {n for n, s in services.items() if "/dev/kfd" in s.get("devices", [])}
    assert mapping == set(AMD_COMPUTE_SERVICES)
    assert [n for n, s in services.items() if "group_add" in s] == []


@pytest.mark.parametrize("profile", ["cpu", "gpu-nvidia"])
def test_other_profiles_get_no_amd_overlay(tmp_path, profile):
    plan = build_plan(settings(tmp_path), profile, [GpuSlot(0)] if profile != "cpu" else [])
    assert all(path.name != "compute.gpu-amd.yaml" for path in plan.generated)
    assert all(f.name != "compute.gpu-amd.yaml" for s in plan.stacks for f in s.files)


def test_gpu_profile_without_gpus_has_no_overlay(tmp_path):
    plan = build_plan(settings(tmp_path), "gpu-nvidia", [])
    assert len(plan.stack("03-agents").files) == 1
    assert (
        "AIRIG_CPU_WORKER_CLASSES=cpu,script,llm,resource"
        in plan.generated[tmp_path / ".airig" / "host.env"]
    )


def test_brain_gpu_group_gets_one_worker_and_the_rest_one_each(tmp_path):
    gpus = [GpuSlot(i, "GTX 1060 6GB", 6 << 30) for i in range(5)]
    plan = build_plan(settings(tmp_path, "AIRIG_BRAIN_GPUS=0,3\n"), "gpu-nvidia", gpus)
    overlay = plan.stack("03-agents").files[1]
    services = yaml.safe_load(plan.generated[overlay])["services"]
    workers = {"worker-brain", "worker-gpu1", "worker-gpu2", "worker-gpu4"}
    assert set(services) == workers | {n.replace("worker", "ollama") for n in workers} | {
        "whisper-gpu1", "whisper-gpu2", "whisper-gpu4"}  # fmt: skip
    for name in ("worker-brain", "ollama-brain"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"][0]
        assert devices["device_ids"] == ["0", "3"]
    brain = services["worker-brain"]
    assert brain["environment"]["OLLAMA_URL"] == "http://ollama-brain:11434"
    assert brain["environment"]["WORKER_GPU"] == "0,3"
    assert "WHISPER_URL" not in brain["environment"]  # takes no transcription


def test_brain_gpu_group_naming_a_missing_gpu_is_a_config_error(tmp_path):
    import pytest

    from airig.common.errors import ConfigError

    with pytest.raises(ConfigError, match="lacks"):
        build_plan(settings(tmp_path, "AIRIG_BRAIN_GPUS=0,7\n"), "gpu-nvidia", [GpuSlot(0)])


def test_the_layout_names_each_worker_its_gpus_and_its_ollama(tmp_path):
    from airig.launcher.compose.plan import worker_layout

    gpus = [GpuSlot(i, "GTX 1060 6GB", 6 << 30) for i in range(5)]
    plan = build_plan(settings(tmp_path, "AIRIG_BRAIN_GPUS=0,3\n"), "gpu-nvidia", gpus)
    rows = {r["worker"]: (r["gpus"], r["ollama"], r["whisper"], r["classes"])
            for r in worker_layout(plan, "2")}  # fmt: skip
    assert rows == {
        "worker-cpu (x2)": ("-", "ollama (shared)", "whisper (shared)", "cpu"),
        "worker-brain": ("0,3", "ollama-brain (own)", "whisper (shared)", "llm,resource"),
        "worker-gpu1": ("1", "ollama-gpu1 (own)", "whisper-gpu1 (own)", "llm,script,resource"),
        "worker-gpu2": ("2", "ollama-gpu2 (own)", "whisper-gpu2 (own)", "llm,script,resource"),
        "worker-gpu4": ("4", "ollama-gpu4 (own)", "whisper-gpu4 (own)", "llm,script,resource"),
    }
    cpu_only = worker_layout(build_plan(settings(tmp_path), "cpu", []), "2")
    assert cpu_only == [{"worker": "worker-cpu (x2)", "gpus": "-", "ollama": "ollama (shared)",
                         "whisper": "whisper (shared)",
                         "classes": "cpu,script,llm,resource"}]  # fmt: skip


class StackRemover:
    """The Docker adapter as `down` uses it: it records, and removes nothing for real."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def down(self, stack: StackPlan) -> None:
        self.calls.append(("down", stack.project))

    def remove_volumes(self, names: list[str]) -> list[str]:
        return []

    def remove_network(self, name: str) -> str:
        self.calls.append(("network", name))
        return f"network {name} removed"


def test_down_on_the_running_plan_removes_every_file_a_gpu_up_wrote(tmp_path):
    """`up` on an AMD rig whose services fall back to CPU images writes every kind of file
    (host.env, the per-GPU overlay, the AMD groups and env, the CPU fallback, Ollama's
    Vulkan overlay, each stack's env file). `down` runs later, in a new process, knowing
    no profile: on plan_for_running it must still leave .airig without a generated file."""
    for stack in ("01-infra", "02-compute", "03-agents"):
        (tmp_path / stack).mkdir()
    rig = settings(tmp_path, "AIRIG_RIG_NAME=rig1\n")
    amd = GpuInfo("amd", "Radeon RX 6600", "discrete", index=0, gfx_target="gfx1032")
    images = choose_images(load_catalog(tmp_path), "gpu-amd", [amd], {})
    assert images.on_cpu  # no listed ROCm build has gfx1032 kernels
    assert images.of("ollama").backend == "vulkan"  # Ollama takes its Vulkan runner
    slots = [GpuSlot(0, render_node="/dev/dri/renderD128", gids=(109,))]
    gpu_plan = build_plan(rig, "gpu-amd", slots, amd_host_env([109]), images)
    Launcher(rig, StackRemover(), None).write_generated(gpu_plan)
    written = {p.relative_to(tmp_path / ".airig") for p in (tmp_path / ".airig").rglob("*")}
    assert {str(p) for p in written if p.suffix} == {
        "host.env", "agents.gpu.yaml", "gpu-amd.env", "compute.gpu-amd.yaml",
        "compute.cpu-fallback.yaml", "compute.vulkan.yaml", "env/01-infra.env",
        "env/02-compute.env", "env/03-agents.env",
    }  # fmt: skip

    later = load_settings(tmp_path)  # a new process: it knows no profile, no GPUs
    running = plan_for_running(later)
    # the same projects and network as the GPU plan: down and status address what up ran
    assert [s.project for s in running.stacks] == [s.project for s in gpu_plan.stacks]
    assert running.network == gpu_plan.network
    docker = StackRemover()
    Launcher(later, docker, None).down(running, volumes=False, keep_models=False)
    assert docker.calls == [
        ("down", "airig-agents"), ("down", "airig-compute"), ("down", "airig-infra"),
        ("network", "ai-network"),
    ]  # fmt: skip
    assert [p for p in (tmp_path / ".airig").rglob("*") if p.is_file()] == []


def test_host_env_names_the_services_up_put_on_a_gpu(tmp_path):
    """The brain's probes alert when one of these answers that it runs on the CPU; a
    service the launcher itself moved to its CPU image (no build fits) is not listed."""
    rig = settings(tmp_path)
    # GTX 1060 (6.1): on the seed rig's 535 every service has a build (Whisper's CUDA
    # 12.4.1 image accepts the 535 branch); on 545 no listed Whisper build runs
    for driver, services in (("535.183.01", "comfyui=cuda,ollama=cuda,whisper=cuda"),
                             ("545.29.06", "comfyui=cuda,ollama=cuda")):  # fmt: skip
        pascal = GpuInfo("nvidia", "GTX 1060", "discrete", index=0, compute_capability="6.1",
                         driver_version=driver)  # fmt: skip
        images = choose_images(load_catalog(tmp_path), "gpu-nvidia", [pascal], {})
        plan = build_plan(rig, "gpu-nvidia", [GpuSlot(0, "GTX 1060")], None, images)
        host_env = plan.generated[tmp_path / ".airig" / "host.env"]
        values = dict(line.split("=", 1) for line in host_env.splitlines())
        assert values["AIRIG_GPU_SERVICES"] == services
    cpu = build_plan(rig, "cpu", [], None, choose_images(load_catalog(tmp_path), "cpu", [], {}))
    assert "AIRIG_GPU_SERVICES=\n" in cpu.generated[tmp_path / ".airig" / "host.env"]


def seed_rig(driver: str = "535.183.01") -> list[GpuInfo]:
    """The seed rig: five GTX 1060 6GB (compute capability 6.1) on the 535 driver."""
    return [GpuInfo("nvidia", "GTX 1060 6GB", "discrete", index=i, compute_capability="6.1",
                    driver_version=driver) for i in range(5)]  # fmt: skip


def agents_overlay(plan) -> dict:
    return yaml.safe_load(plan.generated[plan.stack("03-agents").files[1]])


def test_the_seed_rig_runs_a_whisper_on_each_worker_gpu(tmp_path):
    """Issue 34 §3: the seed ran Whisper on each worker GPU. The brain's cards (0+3) keep
    none; each worker GPU's Whisper sees its own card only and reads the one model store."""
    rig = settings(tmp_path, "AIRIG_BRAIN_GPUS=0,3\nAIRIG_PROJECT_PREFIX=seed\n")
    images = choose_images(load_catalog(tmp_path), "gpu-nvidia", seed_rig(), {})
    assert images.of("whisper").on_gpu
    slots = [GpuSlot(i, "GTX 1060 6GB", 6 << 30) for i in range(5)]
    overlay = agents_overlay(build_plan(rig, "gpu-nvidia", slots, None, images))
    services = overlay["services"]
    assert sorted(n for n in services if n.startswith("whisper")) == [
        "whisper-gpu1", "whisper-gpu2", "whisper-gpu4",
    ]  # fmt: skip
    compose = yaml.safe_load((ROOT / "02-compute" / "compose.yaml").read_text())
    shared = compose["services"]["whisper-gpu-nvidia"]
    for i in (1, 2, 4):
        whisper = services[f"whisper-gpu{i}"]
        dev = whisper["deploy"]["resources"]["reservations"]["devices"]
        assert dev == [{"driver": "nvidia", "device_ids": [str(i)], "capabilities": ["gpu"]}]
        assert whisper["image"].startswith("${WHISPER_IMAGE_CUDA:?")
        # the shared Whisper's settings, volume and healthcheck; no port, no alias
        assert whisper["environment"] == {k: str(v) for k, v in shared["environment"].items()}
        assert whisper["volumes"] == shared["volumes"]
        assert whisper["healthcheck"] == shared["healthcheck"]
        assert whisper["networks"] == ["ai"] and "ports" not in whisper
        env = services[f"worker-gpu{i}"]["environment"]
        assert (env["WHISPER_URL"], env["WORKER_OWN_WHISPER"]) == (
            f"http://whisper-gpu{i}:8000", "1")  # fmt: skip
    assert "WHISPER_URL" not in services["worker-brain"]["environment"]
    assert overlay["volumes"]["whisper-models"] == {"name": "seed-whisper-models",
                                                    "external": True}  # fmt: skip


@pytest.mark.parametrize("host", ["nvidia-545", "nvidia-whisper-cpu", "amd", "intel"])
def test_no_per_gpu_whisper_where_whisper_runs_its_cpu_image(tmp_path, host):
    """speaches has no ROCm or Intel build, and on 545 no listed CUDA build fits the seed's
    cards: there Whisper runs its CPU image, and N CPU copies would only split the same
    cores while each held the model in RAM. The workers share the one `whisper`."""
    rig = settings(tmp_path)
    slots = [GpuSlot(i, render_node=f"/dev/dri/renderD{128 + i}") for i in range(2)]
    if host.startswith("nvidia"):
        cards = seed_rig("545.29.06" if host == "nvidia-545" else "535.183.01")[:2]
        forced = {"whisper": "cpu"} if host == "nvidia-whisper-cpu" else {}  # WHISPER_BACKEND
        images = choose_images(load_catalog(tmp_path), "gpu-nvidia", cards, {}, backends=forced)
        assert not images.of("whisper").on_gpu
        plan = build_plan(rig, "gpu-nvidia", slots, None, images)
    else:
        plan = build_plan(rig, f"gpu-{host}", slots)
    overlay = agents_overlay(plan)
    assert not [n for n in overlay["services"] if n.startswith("whisper")]
    assert "whisper-models" not in overlay["volumes"]
    for i in range(2):
        assert "WHISPER_URL" not in overlay["services"][f"worker-gpu{i}"]["environment"]
