"""The NVIDIA workers' image (issue 39 §2): on gpu-nvidia every GPU worker runs
AIRIG_IMAGE-cuda, the kit's build with OCR_CUDA=1, where 03-agents/ocr-cuda.sh swaps the CPU
onnxruntime for onnxruntime-gpu and NVIDIA's CUDA 12 / cuDNN 9 wheels; the brain, the CPU
workers and every other profile keep AIRIG_IMAGE; `up` builds the second image only then.

No image is built and nothing is downloaded here: the compose model is `docker compose
config`'s (the binary only, no engine), the Dockerfile is read, and the swap script runs
against a fake `pip` and a fake `onnxruntime` module."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from hardware_fakes import NVIDIA_ENGINE_ERROR, FakeDocker, FakeHost, FakeNvml, gtx1060
from packaging.requirements import Requirement
from rich.console import Console
from support import ROOT, write_env
from test_postgres_kit import config, needs_compose

import airig.launcher.hardware.choice
from airig.common.errors import DockerError, HardwareError
from airig.launcher.compose.gpu_workers import CUDA_BUILD_ARG, CUDA_IMAGE, GpuSlot, cuda_image
from airig.launcher.compose.plan import (
    HOST_ENV,
    amd_host_env,
    build_plan,
    cuda_workers,
    intel_host_env,
)
from airig.launcher.hardware import detect
from airig.launcher.hardware.decide import TOOLKIT_FIX
from airig.launcher.lifecycle.builds import CUDA_BUILD_HINT
from airig.launcher.lifecycle.image_source import INPUTS, LABEL, source_hash
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import PROFILES, load_settings

DOCKERFILE = ROOT / "03-agents" / "Dockerfile"
SCRIPT = ROOT / "03-agents" / "ocr-cuda.sh"
KIT = "airig/airig:0.1.0"
NVIDIA = 0x10DE


@pytest.fixture(autouse=True)
def no_shell_settings(monkeypatch):
    for key in [k for k in os.environ if k.startswith(("AIRIG_", "POSTGRES_"))]:
        monkeypatch.delenv(key)


def settings_of(kit: Path, **values: str):
    write_env(kit, **values)
    return load_settings(kit)


def gpu_plan(settings, profile: str):
    """Three cards (0 and 1 workers, 2 the brain's group when asked), files written."""
    gpus = [GpuSlot(i, "card", 8 << 30, gids=(993,)) for i in range(3)]
    extra = {**amd_host_env([993]), **intel_host_env([993])}
    plan = build_plan(settings, profile, gpus if profile != "cpu" else [], extra)
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return plan


def host_env(plan) -> dict[str, str]:
    text = next(t for p, t in plan.generated.items() if p.name == HOST_ENV)
    return dict(line.split("=", 1) for line in text.splitlines())


# ------------------------------------------------------------------ the image's name
@pytest.mark.parametrize(
    ("image", "cuda"),
    [
        ("airig/airig:0.1.0", "airig/airig:0.1.0-cuda"),
        ("airig", "airig:latest-cuda"),
        ("registry.lan:5000/team/airig", "registry.lan:5000/team/airig:latest-cuda"),
        ("registry.lan:5000/airig:dev", "registry.lan:5000/airig:dev-cuda"),
        ("airig/airig:1@sha256:" + "a" * 64, "airig/airig:1-cuda"),  # a digest names no build
        ("airig/airig:", "airig/airig:latest-cuda"),
    ],
)
def test_the_cuda_image_is_airig_image_s_tag_plus_cuda_in_the_same_repository(image, cuda):
    assert cuda_image(image) == cuda


# ------------------------------------------------------------------ the plan
def test_nvidia_workers_name_the_cuda_image_and_host_env_names_it(kit):
    plan = gpu_plan(settings_of(kit, AIRIG_BRAIN_GPUS="2"), "gpu-nvidia")
    assert cuda_workers(plan) == ["worker-brain", "worker-gpu0", "worker-gpu1"]
    assert host_env(plan)[CUDA_IMAGE] == f"{KIT}-cuda"


@pytest.mark.parametrize("profile", ["cpu", "gpu-amd", "gpu-intel"])
def test_other_profiles_keep_one_image_and_name_no_cuda_image(kit, profile):
    plan = gpu_plan(settings_of(kit), profile)
    assert cuda_workers(plan) == []
    assert CUDA_IMAGE not in host_env(plan)
    assert all(CUDA_IMAGE not in text for text in plan.generated.values())


def test_ocr_cuda_off_keeps_nvidia_workers_on_the_kit_s_image(kit):
    plan = gpu_plan(settings_of(kit, AIRIG_OCR_CUDA="off"), "gpu-nvidia")
    assert cuda_workers(plan) == [] and CUDA_IMAGE not in host_env(plan)


@pytest.mark.parametrize("value", ["yes", "ON", "1", "cuda", "on\x00", "o" * 999])
def test_a_value_other_than_on_or_off_is_one_line_with_the_fix(kit, value):
    from airig.common.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        settings_of(kit, AIRIG_OCR_CUDA=value)
    assert refused.value.message.startswith("AIRIG_OCR_CUDA=")
    assert "\n" not in refused.value.message
    assert refused.value.hint == "set AIRIG_OCR_CUDA to on or off"


# ------------------------------------------------------------------ the compose model
def build_of(service: dict[str, Any]) -> dict[str, Any]:
    build = dict(service["build"])
    build["context"] = str(Path(build["context"]).resolve())
    return build


@needs_compose
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_s_compose_model_puts_only_nvidia_workers_on_the_cuda_build(kit, profile):
    """As Compose resolves the files `up` runs: the NVIDIA workers' build is the brain's
    (context, Dockerfile, base image, pip arguments) plus OCR_CUDA=1, under the -cuda tag;
    the brain and the CPU workers, and every worker of the other profiles, build and run
    the kit's image without the argument (the Dockerfile's default, 0)."""
    settings = settings_of(kit, AIRIG_BRAIN_GPUS="2", AIRIG_PIP_INSTALL_ARGS="--no-index")
    plan = gpu_plan(settings, profile)
    services = config(plan.stack("03-agents"))["services"]
    brain = services["brain"]
    assert brain["image"] == KIT and CUDA_BUILD_ARG not in brain["build"].get("args", {})
    assert brain["build"]["args"]["PIP_INSTALL_ARGS"] == "--no-index"
    assert services["worker-cpu"]["image"] == KIT
    assert CUDA_BUILD_ARG not in services["worker-cpu"]["build"].get("args", {})
    workers = sorted(
        name for name in services if name.startswith("worker-") and name != "worker-cpu"
    )
    assert workers == ([] if profile == "cpu" else ["worker-brain", "worker-gpu0", "worker-gpu1"])
    for name in workers:
        worker = services[name]
        if profile != "gpu-nvidia":
            assert worker["image"] == KIT, name
            assert CUDA_BUILD_ARG not in worker["build"].get("args", {}), name
            continue
        assert worker["image"] == f"{KIT}-cuda", name
        expected = build_of(brain)
        expected["args"] = {**expected["args"], CUDA_BUILD_ARG: "1"}
        assert build_of(worker) == expected, name
        # the hardening and limits still come from worker-cpu (extends)
        for key in ("cap_drop", "read_only", "mem_limit", "pids_limit", "security_opt"):
            assert worker[key] == services["worker-cpu"][key], (name, key)


@needs_compose
def test_ocr_cuda_off_gives_nvidia_workers_the_kit_s_image_in_the_compose_model(kit):
    plan = gpu_plan(settings_of(kit, AIRIG_OCR_CUDA="off"), "gpu-nvidia")
    services = config(plan.stack("03-agents"))["services"]
    for name in ("worker-gpu0", "worker-gpu1", "worker-gpu2"):
        assert services[name]["image"] == KIT
        assert CUDA_BUILD_ARG not in services[name]["build"].get("args", {})


# ------------------------------------------------------------------ the Dockerfile
def dockerfile_args() -> dict[str, str]:
    found = {}
    for match in re.finditer(r"^ARG (\w+)=(.*)$", DOCKERFILE.read_text(), re.MULTILINE):
        found[match[1]] = shlex.split(match[2])[0] if match[2] else ""
    return found


def test_the_dockerfile_builds_the_kit_s_image_unless_ocr_cuda_is_1():
    assert dockerfile_args()["OCR_CUDA"] == "0"


def test_the_pinned_onnxruntime_gpu_is_a_cuda_12_build_with_preload_dlls_and_the_extras():
    """1.21.0 added preload_dlls and the cuda/cudnn extras; 1.27.0's extras are CUDA 13's
    (PyPI's metadata of each release; docs/gpus-and-images.md cites them)."""
    wanted = Requirement(dockerfile_args()["ONNXRUNTIME_GPU"])
    assert wanted.name == "onnxruntime-gpu" and wanted.extras == {"cuda", "cudnn"}
    inside = ["1.21.0", "1.22.0", "1.23.2", "1.24.4", "1.25.1", "1.26.0"]
    outside = ["1.19.2", "1.20.2", "1.27.0", "1.31.1"]
    assert [v for v in inside + outside if wanted.specifier.contains(v)] == inside


def test_the_swap_runs_in_the_install_layer_before_the_wheelhouse_is_removed():
    """It needs PIP_INSTALL_ARGS' wheelhouse or index, and one layer keeps the CPU
    onnxruntime's files out of the image."""
    run = re.search(r"^RUN python3 -m venv /opt/airig.*?(?<!\\)\n", DOCKERFILE.read_text(),
                    re.MULTILINE | re.DOTALL)  # fmt: skip
    assert run is not None
    steps = [step.strip() for step in run[0].replace("\\\n", " ").split("&&")]
    assert steps[2] == 'sh /tmp/ocr-cuda.sh "${OCR_CUDA}" "${ONNXRUNTIME_GPU}" ${PIP_INSTALL_ARGS}'
    assert steps[1].startswith("pip install") and steps[3].startswith("rm -rf")
    assert "/tmp/ocr-cuda.sh" in steps[3]
    assert "COPY 03-agents/ocr-cuda.sh /tmp/ocr-cuda.sh" in DOCKERFILE.read_text()


def test_the_build_context_carries_the_script_and_its_changes_rebuild_both_images(tmp_path):
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!03-agents/ocr-cuda.sh" in ignore and ignore.index("*") < ignore.index(
        "!03-agents/ocr-cuda.sh"
    )
    assert "03-agents/ocr-cuda.sh" in INPUTS
    root = tmp_path / "kit"
    for name in INPUTS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes((ROOT / name).read_bytes())
    (root / "airig").mkdir()
    plain = source_hash(root, {"AIRIG_BASE_IMAGE": "python:3.12-slim"})
    cuda = source_hash(root, {"AIRIG_BASE_IMAGE": "python:3.12-slim", CUDA_BUILD_ARG: "1"})
    assert plain != cuda  # one label per image: neither build stands in for the other
    (root / "03-agents" / "ocr-cuda.sh").write_text("#!/bin/sh\nexit 0\n")
    assert source_hash(root, {"AIRIG_BASE_IMAGE": "python:3.12-slim"}) != plain


# ------------------------------------------------------------------ the swap script
FAKE_PIP = """#!/bin/sh
echo "pip $*" >> "$PIP_LOG"
case "$1" in install) exit "${PIP_INSTALL_EXIT:-0}" ;; esac
exit 0
"""


def fake_onnxruntime(where: Path, providers: list[str], preload: bool = True,
                     cuda: str = "12.8") -> Path:  # fmt: skip
    package = where / "onnxruntime"
    package.mkdir(parents=True)
    text = f"__version__ = '1.26.0'\ncuda_version = {cuda!r}\n"
    text += f"def get_available_providers():\n    return {providers!r}\n"
    if preload:
        text += "def preload_dlls(cuda=True, cudnn=True, msvc=True, directory=None):\n    pass\n"
    (package / "__init__.py").write_text(text)
    return where


def swap(tmp_path: Path, *args: str, module: Path | None = None, install_exit: int = 0):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "pip").write_text(FAKE_PIP)
    (bin_dir / "pip").chmod(0o755)
    python = bin_dir / "python"
    if not python.exists():
        python.symlink_to(sys.executable)
    log = tmp_path / "pip.log"
    log.write_text("")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PIP_LOG": str(log),
        "PIP_INSTALL_EXIT": str(install_exit),
        "PYTHONPATH": str(module or tmp_path / "no-module"),
    }
    done = subprocess.run(["sh", str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=60)  # fmt: skip
    return done, log.read_text().splitlines()


SPEC = "onnxruntime-gpu[cuda,cudnn]>=1.21,<1.27"
CUDA_PROVIDERS = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_ocr_cuda_0_leaves_the_cpu_onnxruntime(tmp_path):
    done, pip = swap(tmp_path, "0", SPEC)
    assert done.returncode == 0 and pip == []


def test_ocr_cuda_1_swaps_the_cpu_onnxruntime_for_the_gpu_one_and_checks_it(tmp_path):
    module = fake_onnxruntime(tmp_path / "site", CUDA_PROVIDERS)
    done, pip = swap(tmp_path, "1", SPEC, "--index-url", "https://mirror.lan/simple",
                     module=module)  # fmt: skip
    assert done.returncode == 0, done.stderr
    # the CPU distribution out first: the two install the same module
    assert pip == [
        "pip uninstall --yes onnxruntime",
        f"pip install --no-cache-dir --index-url https://mirror.lan/simple {SPEC}",
    ]
    assert "onnxruntime-gpu 1.26.0 (CUDA 12.8)" in done.stdout


@pytest.mark.parametrize(
    ("providers", "preload", "cuda", "said"),
    [
        (["CPUExecutionProvider"], True, "", "no CUDAExecutionProvider"),
        (CUDA_PROVIDERS, False, "12.8", "no onnxruntime.preload_dlls"),
        (CUDA_PROVIDERS, True, "13.0", "built for CUDA 13.0, not 12"),
    ],
)
def test_a_swap_that_did_not_take_fails_the_build_in_one_line(
    tmp_path, providers, preload, cuda, said
):
    module = fake_onnxruntime(tmp_path / "site", providers, preload, cuda)
    done, _ = swap(tmp_path, "1", SPEC, module=module)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("ocr-cuda.sh: onnxruntime 1.26.0: ") and said in line


def test_a_failed_download_fails_the_build_before_the_check(tmp_path):
    module = fake_onnxruntime(tmp_path / "site", CUDA_PROVIDERS)
    done, pip = swap(tmp_path, "1", SPEC, module=module, install_exit=1)
    assert done.returncode == 1 and pip[-1].startswith("pip install")
    assert "onnxruntime-gpu 1.26.0" not in done.stdout  # the check never ran


@pytest.mark.parametrize("mode", ["", "yes", "true", "2", "1; rm -rf /", "0 ", " 1", "x" * 5000])
def test_an_ocr_cuda_other_than_0_or_1_fails_the_build_and_touches_nothing(tmp_path, mode):
    done, pip = swap(tmp_path, mode, SPEC)
    assert done.returncode == 2 and pip == []
    assert done.stderr.startswith("ocr-cuda.sh: OCR_CUDA=") and "is not 0 or 1" in done.stderr


@pytest.mark.parametrize("spec", ["onnxruntime", "", "torch", "-e .", "--index-url=x onnxruntime"])
def test_a_package_other_than_onnxruntime_gpu_is_refused(tmp_path, spec):
    done, pip = swap(tmp_path, "1", spec)
    assert done.returncode == 2 and pip == []
    assert "does not name onnxruntime-gpu" in done.stderr


def test_the_script_without_its_arguments_says_its_usage(tmp_path):
    done, pip = swap(tmp_path)
    assert done.returncode == 2 and pip == [] and "usage" in done.stderr


# ------------------------------------------------------------------ `up` builds it
class Images:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    def get(self, image: str):
        if image not in self.labels:
            raise docker.errors.ImageNotFound(image)
        return type("Image", (), {"labels": {LABEL: self.labels[image]}})()


class Builds:
    """The adapter's `sdk` (the images' labels) and `build`, recorded."""

    def __init__(self, labels: dict[str, str] | None = None, fail: str = "") -> None:
        self.images = Images(labels or {})
        self.built: list[tuple[str, list[str], dict[str, str]]] = []
        self.fail = fail

    def sdk(self):
        return self

    def build(self, stack, services: list[str], args: dict[str, str]) -> None:
        self.built.append((stack.name, services, args))
        if services[0] == self.fail:
            raise DockerError(f"building {services[0]} failed: no space left on device",
                              "see the lines above, or run doctor")  # fmt: skip


def launcher(settings, docker) -> Launcher:
    return Launcher(settings, docker, Console(file=open(os.devnull, "w"), width=200))  # noqa: SIM115


def test_up_builds_the_cuda_image_once_for_every_nvidia_worker(kit):
    settings = settings_of(kit, AIRIG_BRAIN_GPUS="2")
    plan = gpu_plan(settings, "gpu-nvidia")
    builds = Builds()
    launcher(settings, builds)._build(plan)
    assert [services for _, services, _ in builds.built] == [["brain"], ["worker-brain"]]
    plain, cuda = (args["AIRIG_SOURCE_HASH"] for _, _, args in builds.built)
    assert plain != cuda
    # built and labelled: the next `up` builds neither
    again = Builds({KIT: plain, f"{KIT}-cuda": cuda})
    launcher(settings, again)._build(plan)
    assert again.built == []


@pytest.mark.parametrize(
    ("profile", "knob"),
    [("cpu", "on"), ("gpu-amd", "on"), ("gpu-intel", "on"), ("gpu-nvidia", "off")],
)
def test_up_builds_one_image_where_no_worker_runs_the_cuda_one(kit, profile, knob):
    settings = settings_of(kit, AIRIG_OCR_CUDA=knob)
    builds = Builds()
    launcher(settings, builds)._build(gpu_plan(settings, profile))
    assert [services for _, services, _ in builds.built] == [["brain"]]


def test_a_failed_cuda_build_says_how_to_run_without_it(kit):
    settings = settings_of(kit)
    builds = Builds(fail="worker-gpu0")
    with pytest.raises(DockerError) as failed:
        launcher(settings, builds)._build(gpu_plan(settings, "gpu-nvidia"))
    assert failed.value.message == "building worker-gpu0 failed: no space left on device"
    assert failed.value.hint == CUDA_BUILD_HINT and "AIRIG_OCR_CUDA=off" in CUDA_BUILD_HINT


@needs_compose
def test_dry_run_shows_the_cuda_build_on_nvidia_only(kit):
    from airig.launcher.compose.docker import Docker

    settings = settings_of(kit)
    lines = launcher(settings, Docker()).commands(gpu_plan(settings, "gpu-nvidia"))
    [cuda] = [line for line in lines if "OCR_CUDA=1" in line]
    assert " build --quiet --build-arg 'AIRIG_SOURCE_HASH=<hash>' worker-gpu0 " in cuda
    assert f"# {KIT}-cuda, the NVIDIA workers'" in cuda
    cpu_lines = launcher(settings, Docker()).commands(gpu_plan(settings, "cpu"))
    assert not [line for line in cpu_lines if "OCR_CUDA" in line]


# ------------------------------------------------------------------ no NVIDIA runtime
class Engine:
    """Enough of the adapter for `up`'s checks; anything that would change the engine
    (a network, a pull, a build, a stack) is recorded, and must never be reached."""

    def __init__(self) -> None:
        self.changes: list[str] = []

    def binary(self) -> str:
        return "docker"

    def engine_info(self) -> dict[str, str]:
        return {"ServerVersion": "27.0"}

    def compose_version(self) -> tuple[int, ...]:
        return (2, 40, 3)

    def __getattr__(self, name: str):
        def change(*_args: Any, **_kwargs: Any) -> Any:
            self.changes.append(name)
            raise AssertionError(f"`up` reached {name}")

        return change


def test_a_forced_nvidia_profile_without_the_nvidia_runtime_is_refused_before_any_build(
    kit, tmp_path, monkeypatch
):
    """The kit's existing refusal (decide.py's TOOLKIT_FIX) comes first: the CUDA image is
    neither built nor named, no file is written, nothing is started."""
    host = FakeHost(tmp_path / "host")
    host.pci("0000:01:00.0", NVIDIA, 0x1C03, driver="nvidia")
    report = detect(sysfs_root=host.sys, dev_root=host.dev, nvml=FakeNvml([gtx1060(1)]),
                    amdsmi=None, docker_client=FakeDocker(run_error=NVIDIA_ENGINE_ERROR),
                    probe_image=["airig-test/base:bookworm"], pci_ids=None)  # fmt: skip
    monkeypatch.setattr(airig.launcher.hardware.choice, "detect_report", lambda *_a, **_k: report)
    settings = settings_of(kit, AIRIG_PROFILE="gpu-nvidia")
    engine = Engine()
    with pytest.raises(HardwareError) as refused:
        launcher(settings, engine).up()
    assert refused.value.message.startswith("gpu-nvidia was requested by AIRIG_PROFILE")
    assert NVIDIA_ENGINE_ERROR in refused.value.message
    assert refused.value.hint == TOOLKIT_FIX
    assert engine.changes == []
    assert not (kit / ".airig" / HOST_ENV).exists()
    assert not (kit / ".airig" / "agents.gpu.yaml").exists()
