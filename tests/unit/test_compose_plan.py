from __future__ import annotations

import yaml

from airig.compose_plan import GpuSlot, build_plan
from airig.settings import load_settings


def settings(tmp_path, env=""):
    (tmp_path / ".env").write_text(env)
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
    assert plan.generated == {host_env: (
        "AIRIG_CPU_WORKER_CLASSES=cpu,script,llm,resource\nAIRIG_RIG_NAME=rig1\n"
        "AIRIG_WORKER_NAME_PREFIX=\n"
    )}  # fmt: skip


def test_gpu_layout_one_worker_per_gpu_pinned(tmp_path):
    gpus = [GpuSlot(0, "GTX 1060"), GpuSlot(3, "GTX 1060")]
    plan = build_plan(settings(tmp_path), "gpu-nvidia", gpus)
    agents = plan.stack("03-agents")
    overlay = agents.files[1]
    services = yaml.safe_load(plan.generated[overlay])["services"]
    assert set(services) == {"worker-gpu0", "worker-gpu3", "ollama-gpu0", "ollama-gpu3"}
    for name in ("worker-gpu3", "ollama-gpu3"):
        dev = services[name]["deploy"]["resources"]["reservations"]["devices"][0]
        assert dev == {"driver": "nvidia", "device_ids": ["3"], "capabilities": ["gpu"]}
    worker, ollama = services["worker-gpu3"], services["ollama-gpu3"]
    assert worker["environment"]["WORKER_GPU"] == "3"
    # each GPU worker drives its own Ollama, which never unloads on a timer
    assert worker["environment"]["OLLAMA_URL"] == "http://ollama-gpu3:11434"
    assert worker["depends_on"] == {"ollama-gpu3": {"condition": "service_healthy"}}
    assert ollama["environment"]["OLLAMA_KEEP_ALIVE"] == "-1"
    assert ollama["environment"]["OLLAMA_NOPRUNE"] == "1"
    assert ollama["networks"] == ["ai"]  # no `ollama` alias: that name is the shared one


def test_amd_layout_maps_one_render_node_and_host_gids(tmp_path):
    plan = build_plan(
        settings(tmp_path, "HSA_OVERRIDE_GFX_VERSION=10.3.0\nAIRIG_RIG_NAME=rig1\n"),
        "gpu-amd",
        [GpuSlot(0, render_node="/dev/dri/renderD129")],
        {"AIRIG_RENDER_GID": "993", "AIRIG_VIDEO_GID": "44"},
    )
    overlay = plan.stack("03-agents").files[1]
    services = yaml.safe_load(plan.generated[overlay])["services"]
    for name in ("worker-gpu0", "ollama-gpu0"):
        assert services[name]["devices"] == ["/dev/kfd", "/dev/dri/renderD129"]
    assert services["ollama-gpu0"]["environment"]["ROCR_VISIBLE_DEVICES"] == "0"
    assert services["ollama-gpu0"]["image"].startswith("${OLLAMA_IMAGE_ROCM")
    host_env = tmp_path / ".airig" / "host.env"
    assert plan.generated[host_env] == (
        "AIRIG_CPU_WORKER_CLASSES=cpu\nAIRIG_RENDER_GID=993\nAIRIG_RIG_NAME=rig1\n"
        "AIRIG_VIDEO_GID=44\nAIRIG_WORKER_NAME_PREFIX=\n"
    )
    assert plan.stack("02-compute").env_files == (tmp_path / ".env", host_env)
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in plan.generated[tmp_path / ".airig" / "gpu-amd.env"]


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
    assert set(services) == workers | {n.replace("worker", "ollama") for n in workers}
    for name in ("worker-brain", "ollama-brain"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"][0]
        assert devices["device_ids"] == ["0", "3"]
    brain = services["worker-brain"]
    assert brain["environment"]["OLLAMA_URL"] == "http://ollama-brain:11434"
    assert brain["environment"]["WORKER_GPU"] == "0,3"


def test_brain_gpu_group_naming_a_missing_gpu_is_a_config_error(tmp_path):
    import pytest

    from airig.errors import ConfigError

    with pytest.raises(ConfigError, match="lacks"):
        build_plan(settings(tmp_path, "AIRIG_BRAIN_GPUS=0,7\n"), "gpu-nvidia", [GpuSlot(0)])


def test_the_layout_names_each_worker_its_gpus_and_its_ollama(tmp_path):
    from airig.compose_plan import worker_layout

    gpus = [GpuSlot(i, "GTX 1060 6GB", 6 << 30) for i in range(5)]
    plan = build_plan(settings(tmp_path, "AIRIG_BRAIN_GPUS=0,3\n"), "gpu-nvidia", gpus)
    rows = {r["worker"]: (r["gpus"], r["ollama"], r["classes"]) for r in worker_layout(plan, "2")}
    assert rows == {
        "worker-cpu (x2)": ("-", "ollama (shared)", "cpu"),
        "worker-brain": ("0,3", "ollama-brain (own)", "llm,resource"),
        "worker-gpu1": ("1", "ollama-gpu1 (own)", "llm,script,resource"),
        "worker-gpu2": ("2", "ollama-gpu2 (own)", "llm,script,resource"),
        "worker-gpu4": ("4", "ollama-gpu4 (own)", "llm,script,resource"),
    }
    cpu_only = worker_layout(build_plan(settings(tmp_path), "cpu", []), "2")
    assert cpu_only == [{"worker": "worker-cpu (x2)", "gpus": "-", "ollama": "ollama (shared)",
                         "classes": "cpu,script,llm,resource"}]  # fmt: skip
