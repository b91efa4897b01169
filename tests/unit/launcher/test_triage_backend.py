"""Which backend triage says each compute service uses, read from the engine's inspect
data as the collector reads it (issue 28), and the GPU-fallback check on a Vulkan Ollama:
Ollama reports `size_vram` the same way for every GPU library, so a model fully offloaded
through the Vulkan runner is on the GPU, none of it in VRAM is a fallback that names
vulkan, and a partial offload is judged as on CUDA.

The containers are built the way the kit runs each backend (plan.py, 02-compute/
compose.yaml) and fed through the collector, so the tests start from what Docker reports."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

import airig.launcher.views.triage.collect as collect
from airig.launcher.views.triage import ContainerFacts, Facts, classify
from airig.launcher.views.triage.backend import backend, backends
from airig.launcher.views.triage.facts import GPU_FALLBACK, DeviceRequest
from airig.launcher.views.triage.render import BACKENDS, HEALTHY, as_data, show

# ollama/ollama's own ENV (its Dockerfile's final stage), which the kit's Vulkan image
# inherits: NVIDIA_VISIBLE_DEVICES=all is in every Ollama and names no GPU by itself
OLLAMA_IMAGE_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    "NVIDIA_VISIBLE_DEVICES=all",
    "OLLAMA_HOST=0.0.0.0:11434",
]
OLLAMA_KIT_ENV = ["OLLAMA_KEEP_ALIVE=-1", "OLLAMA_NOPRUNE=1", "OLLAMA_CONTEXT_LENGTH=8192"]


def device(path: str) -> dict[str, str]:
    """One HostConfig.Devices entry as the engine reports a Compose `devices:` item."""
    return {"PathOnHost": path, "PathInContainer": path, "CgroupPermissions": "rwm"}


def nvidia(ids: list[str] | None = None) -> dict[str, Any]:
    """The DeviceRequest Compose makes of `driver: nvidia` (count all, or device_ids)."""
    return {"Driver": "nvidia", "Count": 0 if ids else -1, "DeviceIDs": ids,
            "Capabilities": [["gpu"]], "Options": None}  # fmt: skip


def engine_facts(
    service: str,
    image: str,
    env: list[str],
    devices: list[dict[str, str]] | None = None,
    requests: list[dict[str, Any]] | None = None,
    stack: str = "03-agents",
) -> ContainerFacts:
    """The collector's ContainerFacts for a running container with this inspect data."""
    attrs = {
        "RestartCount": 0,
        "State": {"Status": "running", "ExitCode": 0, "OOMKilled": False,
                  "Health": {"Status": "healthy", "Log": []}},
        "Config": {"Image": image, "Env": env, "Hostname": "0123abcd4567",
                   "Labels": {"com.docker.compose.service": service}},
        "HostConfig": {"Devices": devices, "DeviceRequests": requests,
                       "RestartPolicy": {"Name": "unless-stopped"}},
        "NetworkSettings": {"Ports": {}},
    }  # fmt: skip
    name = f"airig-{stack.split('-')[1]}-{service}-1"
    container = SimpleNamespace(name=name, id=name, attrs=attrs, logs=lambda tail: b"")
    docker = SimpleNamespace(sdk=lambda: SimpleNamespace(events=lambda **kw: iter(())))
    return collect._facts(stack, container, docker, 3600)  # type: ignore[arg-type]


# ollama-gpu0 on an Intel or AMD card through Vulkan (gpu_workers.py _gpu_ollama with a VulkanBuild)
VULKAN_OLLAMA = engine_facts(
    "ollama-gpu0", "airig/ollama-vulkan:0.20.6",
    [*OLLAMA_KIT_ENV, "OLLAMA_VULKAN=1", *OLLAMA_IMAGE_ENV],
    devices=[device("/dev/dri/renderD128")],
)  # fmt: skip
# the same slot on an NVIDIA card (gpu_workers.py _pin: device_ids)
CUDA_OLLAMA = engine_facts(
    "ollama-gpu0", "ollama/ollama:0.20.6", [*OLLAMA_KIT_ENV, *OLLAMA_IMAGE_ENV],
    requests=[nvidia(["0"])],
)  # fmt: skip


def ollama_ps(size: int, size_vram: int) -> tuple[dict[str, Any], ...]:
    """What the collector keeps of Ollama 0.20.6's /api/ps (the ollama library's ps()):
    one model, `size_vram` of its `size` bytes in VRAM, whichever GPU library holds it."""
    import ollama

    answer = ollama.ProcessResponse.model_validate({"models": [{
        "name": "qwen2.5:7b", "model": "qwen2.5:7b", "size": size, "size_vram": size_vram,
        "digest": "845dbda0ea48ed749caafd9e6037047aa19acfcfd82e704d7ca97d631a0b697e",
        "details": {"parent_model": "", "format": "gguf", "family": "qwen2",
                    "families": ["qwen2"], "parameter_size": "7.6B",
                    "quantization_level": "Q4_K_M"},
        "expires_at": "2318-11-03T10:00:00Z", "context_length": 8192,
    }]})  # fmt: skip
    return tuple(m.model_dump() for m in answer.models)


WHISPER_CPU = engine_facts(
    "whisper-gpu-intel", "ghcr.io/speaches-ai/speaches:0.8.3-cpu",
    ["WHISPER__INFERENCE_DEVICE=cpu", "UVICORN_HOST=0.0.0.0"], stack="02-compute",
)  # fmt: skip


# ---------------------------------------------------------------- what the collector reads


def test_the_collector_keeps_devices_requests_image_and_the_backend_env():
    assert VULKAN_OLLAMA.devices == ("/dev/dri/renderD128:/dev/dri/renderD128:rwm",)
    assert VULKAN_OLLAMA.device_requests == ()
    assert VULKAN_OLLAMA.image == "airig/ollama-vulkan:0.20.6"
    assert VULKAN_OLLAMA.env == {"OLLAMA_HOST": "0.0.0.0:11434", "OLLAMA_VULKAN": "1"}
    assert CUDA_OLLAMA.device_requests == (DeviceRequest("nvidia", ("0",), 0),)


@pytest.mark.parametrize(
    "facts",
    [
        VULKAN_OLLAMA,  # a render node, no /dev/kfd: nothing NVIDIA or AMD-ROCm about it
        engine_facts("comfyui-gpu-intel", "yanwk/comfyui-boot:xpu", ["CLI_ARGS="],
                     devices=[device("/dev/dri")], stack="02-compute"),
        CUDA_OLLAMA,
        engine_facts("ollama-gpu-amd", "ollama/ollama:0.20.6-rocm", OLLAMA_IMAGE_ENV,
                     devices=[device("/dev/kfd"), device("/dev/dri")], stack="02-compute"),
    ],
    ids=["vulkan", "xpu", "cuda", "rocm"],
)  # fmt: skip
def test_a_container_given_a_gpu_device_is_gpu_requested(facts: ContainerFacts):
    assert facts.gpu_requested


def test_a_container_without_devices_is_not():
    assert not WHISPER_CPU.gpu_requested


# ---------------------------------------------------------------- the backend of each way


@pytest.mark.parametrize(
    ("facts", "line"),
    [
        (VULKAN_OLLAMA, "ollama-gpu0: vulkan (OLLAMA_VULKAN=1, /dev/dri/renderD128)"),
        (CUDA_OLLAMA, "ollama-gpu0: cuda (device request nvidia GPU 0)"),
        # 02-compute's shared GPU variants: count all, the AMD and Intel device lists
        (engine_facts("ollama-gpu-nvidia", "ollama/ollama:0.20.6", OLLAMA_IMAGE_ENV,
                      requests=[nvidia()], stack="02-compute"),
         "ollama-gpu-nvidia: cuda (device request nvidia all GPUs)"),
        (engine_facts("ollama-gpu-amd", "ollama/ollama:0.20.6-rocm",
                      [*OLLAMA_IMAGE_ENV, "ROCR_VISIBLE_DEVICES=0"],
                      devices=[device("/dev/kfd"), device("/dev/dri/renderD129")],
                      stack="02-compute"),
         "ollama-gpu-amd: rocm (/dev/kfd, /dev/dri/renderD129, ROCR_VISIBLE_DEVICES=0)"),
        (engine_facts("ollama-gpu-intel", "airig/ollama-vulkan:0.20.6",
                      [*OLLAMA_IMAGE_ENV, "OLLAMA_VULKAN=1"], devices=[device("/dev/dri")],
                      stack="02-compute"),
         "ollama-gpu-intel: vulkan (OLLAMA_VULKAN=1, /dev/dri)"),
        (engine_facts("comfyui-gpu-intel", "yanwk/comfyui-boot:xpu", ["CLI_ARGS="],
                      devices=[device("/dev/dri")], stack="02-compute"),
         "comfyui-gpu-intel: xpu (/dev/dri, image yanwk/comfyui-boot:xpu)"),
        (WHISPER_CPU, "whisper-gpu-intel: cpu (WHISPER__INFERENCE_DEVICE=cpu, no GPU device)"),
        (engine_facts("comfyui-cpu", "yanwk/comfyui-boot:cpu", ["CLI_ARGS=--cpu "],
                      stack="02-compute"),
         "comfyui-cpu: cpu (CLI_ARGS --cpu, no GPU device)"),
        # cpu_fallback_overlay: the CPU image in the GPU variant, its devices reset
        (engine_facts("ollama-gpu-amd", "ollama/ollama:0.20.6", OLLAMA_IMAGE_ENV,
                      stack="02-compute"),
         "ollama-gpu-amd: cpu (no GPU device)"),
    ],
    ids=["vulkan-slot", "cuda-slot", "cuda-all", "rocm", "vulkan-shared", "xpu", "whisper-cpu",
         "comfyui-cpu", "cpu-fallback-overlay"],
)  # fmt: skip
def test_each_backend_with_its_evidence(facts: ContainerFacts, line: str):
    [row] = backends([facts])
    assert row.line() == line


def test_a_render_node_without_ollama_vulkan_leaves_ollama_on_the_cpu():
    """Ollama before v0.30.0 runs its Vulkan runner only with OLLAMA_VULKAN=1: the plain
    image given /dev/dri runs on the CPU, and triage says why."""
    plain = engine_facts("ollama-gpu0", "ollama/ollama:0.20.6", OLLAMA_IMAGE_ENV,
                         devices=[device("/dev/dri/renderD128")])  # fmt: skip
    assert str(backend(plain)) == "cpu (no OLLAMA_VULKAN=1, /dev/dri/renderD128 unused)"


def test_a_gpu_device_the_settings_leave_unused_is_cpu_with_both_said():
    whisper = engine_facts("whisper-gpu-nvidia", "ghcr.io/speaches-ai/speaches:0.8.3-cuda",
                           ["WHISPER__INFERENCE_DEVICE=cpu"], requests=[nvidia()],
                           stack="02-compute")  # fmt: skip
    assert str(backend(whisper)) == (
        "cpu (WHISPER__INFERENCE_DEVICE=cpu, device request nvidia all GPUs unused)"
    )


@pytest.mark.parametrize(
    ("ids", "name"), [(["nvidia.com/gpu=0"], "cuda"), (["amd.com/gpu=0"], "rocm")]
)
def test_a_cdi_device_request_names_its_vendor(ids: list[str], name: str):
    request = {"Driver": "cdi", "Count": 0, "DeviceIDs": ids, "Capabilities": None}
    facts = engine_facts("ollama-gpu0", "ollama/ollama:0.20.6", OLLAMA_IMAGE_ENV,
                         requests=[request])  # fmt: skip
    assert backend(facts).name == name


def test_only_the_compute_services_are_listed_by_name():
    init = engine_facts("ollama-init", "airig/airig:1", [], stack="02-compute")
    worker = engine_facts("worker-gpu0", "airig/airig:1", [], requests=[nvidia(["0"])])
    rows = backends([WHISPER_CPU, worker, VULKAN_OLLAMA, init])
    assert [r.service for r in rows] == ["ollama-gpu0", "whisper-gpu-intel"]


# ---------------------------------------------------------------- where the user reads it


def test_the_text_starts_with_the_backends_then_the_verdict():
    console = Console(record=True, width=200, color_system=None)
    show([], console, backends([VULKAN_OLLAMA, WHISPER_CPU]))
    assert console.export_text().splitlines() == [
        BACKENDS,
        "  ollama-gpu0: vulkan (OLLAMA_VULKAN=1, /dev/dri/renderD128)",
        "  whisper-gpu-intel: cpu (WHISPER__INFERENCE_DEVICE=cpu, no GPU device)",
        HEALTHY,
    ]


def test_the_json_carries_each_backend_as_data():
    data = as_data([], backends([VULKAN_OLLAMA]))
    assert data["backends"] == [{
        "service": "ollama-gpu0", "container": "airig-agents-ollama-gpu0-1",
        "image": "airig/ollama-vulkan:0.20.6", "backend": "vulkan",
        "evidence": ["OLLAMA_VULKAN=1", "/dev/dri/renderD128"],
    }]  # fmt: skip
    assert (data["healthy"], data["findings"]) == (True, [])


# ---------------------------------------------------------------- GPU fallback on Vulkan

GB = 1_000_000_000


def fallback(facts: ContainerFacts, size: int, size_vram: int) -> list[str]:
    """The summaries of triage's findings with this /api/ps answer from ``facts``' Ollama."""
    found = classify(Facts(containers=(facts,), ollama_ps={facts.name: ollama_ps(size, size_vram)}))
    assert {f.cls for f in found} <= {GPU_FALLBACK}
    return [f.summary for f in found]


def test_a_model_fully_offloaded_through_vulkan_is_on_the_gpu():
    assert fallback(VULKAN_OLLAMA, 5 * GB, 5 * GB) == []


def test_no_vram_on_a_vulkan_ollama_is_a_fallback_that_names_vulkan():
    [finding] = classify(
        Facts(containers=(VULKAN_OLLAMA,), ollama_ps={VULKAN_OLLAMA.name: ollama_ps(5 * GB, 0)})
    )
    assert finding.cls == GPU_FALLBACK
    assert finding.summary == "ollama-gpu0 (vulkan) was given a GPU but runs on the CPU"
    assert finding.evidence == (
        f"/api/ps: qwen2.5:7b size {5 * GB} size_vram 0",
        "docker: given vulkan (OLLAMA_VULKAN=1, /dev/dri/renderD128)",
    )


def test_the_cuda_fallback_names_cuda():
    assert fallback(CUDA_OLLAMA, 5 * GB, 0) == [
        "ollama-gpu0 (cuda) was given a GPU but runs on the CPU"
    ]


@pytest.mark.parametrize("in_vram", [1.0, 0.9, 0.5, 0.49, 0.1, 0.0])
def test_a_partial_offload_is_judged_on_vulkan_as_on_cuda(in_vram: float):
    size = 5 * GB
    on_vulkan = fallback(VULKAN_OLLAMA, size, int(in_vram * size))
    on_cuda = fallback(CUDA_OLLAMA, size, int(in_vram * size))
    assert len(on_vulkan) == len(on_cuda) == (1 if in_vram < 0.5 else 0)


def test_the_brains_alert_on_a_vulkan_ollama_names_vulkan_too():
    shared = engine_facts("ollama-gpu-intel", "airig/ollama-vulkan:0.20.6",
                          [*OLLAMA_IMAGE_ENV, "OLLAMA_VULKAN=1"], devices=[device("/dev/dri")],
                          stack="02-compute")  # fmt: skip
    message = "given a GPU (vulkan) but runs on the CPU: /api/ps: qwen2.5:7b"
    alert = {"kind": "gpu_fallback", "subject": "ollama", "fired_at": 0.0, "message": message}
    [finding] = classify(Facts(containers=(shared,), alerts=(alert,)))
    assert finding.summary == (
        "ollama-gpu-intel (vulkan) was given a GPU but runs on the CPU (the brain's probe)"
    )
