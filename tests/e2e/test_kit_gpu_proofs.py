"""The GPU proofs' containers on the real engine (issue 34 §1).

The test machines have no GPU, so the proof stand-in (tests/standins/proof/) prints what
the real frameworks print on each failure the issue quotes; what is real here is the rest:
the proof scripts themselves (run by the image's python3), the container's start, the wait
(an exit, Ollama's discovery line, a hang), the logs read back, the verdict, and that no
proof container stays behind. On an engine without the NVIDIA toolkit, a proof with the
NVIDIA device request is refused by the engine itself, and quoted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import docker
import pytest

from airig.launcher.compose.docker import PROBE_LABEL
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.proofs.judge import FAILED, PASSED, TIMEOUT, judge
from airig.launcher.proofs.run import run_options, run_proof
from airig.launcher.proofs.scripts import spec_for

# its images, not the kit's own: first in its lane (e2e_lanes.EARLY)
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("early_images")]

BASE = os.environ.get("AIRIG_TEST_BASE_IMAGE", "airig-test/base:bookworm")
IMAGE = "airig-test/proof:test"
CONTEXT = Path(__file__).resolve().parents[1] / "standins" / "proof"


@pytest.fixture(scope="module")
def client():
    engine = docker.from_env(timeout=120)
    try:
        engine.images.get(BASE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"image {BASE} not built (bash tests/images/build-base.sh)")
    subprocess.run(["docker", "build", "-q", "--build-arg", f"BASE_IMAGE={BASE}", "-t", IMAGE,
                    str(CONTEXT)], check=True, capture_output=True)  # fmt: skip
    yield engine
    left = engine.containers.list(all=True, filters={"label": PROBE_LABEL})
    assert left == [], "a proof container stayed behind"


def prove(client, service, backend, env, timeout=60.0, options=None):
    spec = spec_for(service, backend, env)
    outcome = run_proof(client, IMAGE, spec, options or {}, timeout)
    return judge(outcome, spec.until), outcome


def test_comfyui_proof_passes_when_torch_runs_its_operation(client):
    (status, detail, _), outcome = prove(client, "comfyui", "cuda", {"FAKE_TORCH": "ok"})
    assert status == PASSED, outcome.output
    assert detail == "PyTorch 2.9.1+cu126 on NVIDIA GeForce GTX 1060 6GB"


def test_comfyui_proof_quotes_no_kernel_image(client):
    (status, detail, fix), _ = prove(client, "comfyui", "cuda", {"FAKE_TORCH": "no_kernel"})
    assert status == FAILED
    assert "no kernel image is available for execution on the device" in detail
    assert "compute capability" in fix


def test_comfyui_proof_quotes_error_804_when_torch_sees_no_gpu(client):
    (status, detail, fix), _ = prove(client, "comfyui", "cuda", {"FAKE_TORCH": "no_gpu"})
    assert status == FAILED and "forward compatibility was attempted" in detail
    assert "data-center GPU" in fix


def test_whisper_proof_without_a_cuda_device_is_quoted(client):
    (status, detail, _), _ = prove(client, "whisper", "cuda", {"FAKE_CT2_DEVICES": "0"})
    assert status == FAILED
    assert detail == "CTranslate2 4.5.0 sees no CUDA device (get_cuda_device_count() = 0)"


def test_a_hanging_proof_is_a_timeout_and_its_container_is_removed(client):
    (status, detail, _), outcome = prove(client, "comfyui", "cuda", {"FAKE_TORCH": "hang"},
                                         timeout=3)  # fmt: skip
    assert status == TIMEOUT and outcome.timed_out and detail.startswith("no answer in")


def test_a_crashing_proof_is_a_failure(client):
    (status, detail, _), outcome = prove(client, "comfyui", "cuda", {"FAKE_TORCH": "crash"})
    assert status == FAILED and outcome.exit_code not in (0, None), detail


def test_ollama_proof_reads_the_servers_discovery_then_stops_it(client):
    (status, detail, _), outcome = prove(client, "ollama", "cuda", {"FAKE_OLLAMA": "cuda"})
    assert status == PASSED, outcome.output
    assert detail == "Ollama discovered NVIDIA GeForce GTX 1060 6GB (cuda)"
    assert outcome.exit_code is None and outcome.seconds < 30  # stopped, not waited out


def test_ollama_proof_quotes_no_compatible_gpus(client):
    (status, detail, _), _ = prove(client, "ollama", "cuda", {"FAKE_OLLAMA": "none"})
    assert status == FAILED and "no compatible GPUs were discovered" in detail


def test_ollama_that_never_discovers_is_a_timeout(client):
    (status, _, _), _ = prove(client, "ollama", "cuda", {"FAKE_OLLAMA": "silent"}, timeout=4)
    assert status == TIMEOUT


def test_the_nvidia_request_on_an_engine_without_the_toolkit_is_the_engines_refusal(client):
    gpu = GpuInfo("nvidia", "NVIDIA GeForce GTX 1060 6GB", "discrete", index=0)
    info = client.info()
    if "nvidia" in (info.get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    (status, detail, _), _ = prove(client, "comfyui", "cuda", {"FAKE_TORCH": "ok"},
                                   options=run_options(gpu))  # fmt: skip
    assert status == FAILED and "nvidia" in detail.lower(), detail


def test_an_image_without_python_is_not_run_and_not_failed(client):
    from airig.launcher.proofs.judge import NOT_RUN

    spec = spec_for("comfyui", "cuda", {"PATH": "/nowhere"})  # the shim finds no python
    status, detail, _ = judge(run_proof(client, IMAGE, spec, {}, 60.0))
    assert (status, detail) == (NOT_RUN, "the image has no python3 or python")
