"""Launcher and GPU detection on hostile hosts (issue 9, items 11-14 and doctor redaction).

Each test drives the real CLI edge, launcher or detection code on a fixture host: a fake
sysfs tree, a fake NVML and a fake engine standing in for the docker SDK client.
"""

from __future__ import annotations

import io
import json
from functools import partial
from pathlib import Path

import pytest
import requests
from docker.errors import APIError
from hardware_fakes import (
    NVIDIA_ENGINE_ERROR,
    PROBE_IMAGE,
    FakeDocker,
    FakeHost,
    FakeNvml,
    gtx1060,
)
from rich.console import Console
from support import error_lines, run_cli

import airig.launcher.cli.app
import airig.launcher.console
from airig.common.errors import ConfigError, DockerError, HardwareError
from airig.launcher.compose.docker import Docker
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware import decide_profile, detect, render_table
from airig.launcher.hardware.choice import choose_profile, gpu_slots
from airig.launcher.hardware.decide import PROBE_TIMEOUT_FIX
from airig.launcher.hardware.pci import normalize_address
from airig.launcher.hardware.report import HardwareReport
from airig.launcher.lifecycle.preflight import Check
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import load_settings
from airig.launcher.views.status import (
    bundle,
    checks_table,
    redacted_env,
    services_table,
    workers_table,
)

NVIDIA = 0x10DE
# Engine text with both traps: "[[gpu]]" (eaten by markup) and "[/…]" (a closing tag).
BRACKETED = f"{NVIDIA_ENGINE_ERROR} (device [/dev/dri/renderD128])"
BASE = "python:3.12-slim"  # the kit's default base image, the probe's last choice


def base_engine(**kwargs) -> FakeDocker:
    """An engine holding the base image, so a GPU probe can run."""
    return FakeDocker(images=(BASE,), **kwargs)


# ------------------------------------------------------------------ fixtures
class FakeAdapter(Docker):
    """The real adapter over a fake engine; only the docker CLI (compose) parts are faked."""

    def __init__(self, engine: FakeDocker, probe_engine: FakeDocker | None = None) -> None:
        super().__init__()
        self.engine, self.probe_engine = engine, probe_engine or engine
        self.calls: list[tuple] = []

    def binary(self) -> str:
        return "/usr/bin/docker"

    def compose_version(self) -> tuple[int, ...]:
        return (2, 29, 1)

    def sdk(self):
        return self.engine

    def probe_sdk(self, timeout: float):
        self.calls.append(("probe_sdk", timeout))
        return self.probe_engine

    def pull_image(self, image: str) -> None:
        self.calls.append(("pull", image))
        self.engine.images_present.add(image)

    def build(self, stack, services, args) -> None:
        self.calls.append(("build", tuple(services)))

    def down(self, stack) -> None:
        self.calls.append(("down", stack.name))

    def services(self, stack) -> list:
        return []


class Raises:
    """Any attribute call raises ``exc``: a network/volume/container collection gone bad."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            raise self.exc

        return call


@pytest.fixture
def kit(launcher_kit: Path) -> Path:
    return launcher_kit


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


def on_host(monkeypatch: pytest.MonkeyPatch, host: FakeHost, nvml: FakeNvml) -> None:
    """Detection inside the launcher and the CLI sees the fixture host."""
    fixture = partial(detect, sysfs_root=host.sys, dev_root=host.dev, nvml=nvml, amdsmi=None)
    monkeypatch.setattr("airig.launcher.hardware.choice.detect", fixture)


def nvidia_host(monkeypatch: pytest.MonkeyPatch, host: FakeHost) -> None:
    host.pci("0000:01:00.0", NVIDIA, 0x1C03, driver="nvidia")
    on_host(monkeypatch, host, FakeNvml([gtx1060(1)]))


def rendered(renderable) -> str:
    out = io.StringIO()
    Console(file=out, width=300, color_system=None).print(renderable)
    return out.getvalue()


# ------------------------------------------------------------------ 11: Docker failures
class SlowGpuStart(FakeDocker):
    """nvidia-container-cli initialising many cards: the start call outlives the timeout."""

    def __init__(self) -> None:
        super().__init__(images=(BASE,))
        engine = self

        class Containers(type(self.containers)):
            def run(self, image, command=None, **kwargs):
                engine.runs.append({"image": image, **kwargs})
                raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=5)")

            def get(self, name):
                raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=5)")

        self.containers = Containers(self)


def test_probe_timeout_is_a_finding_with_its_fix_not_a_traceback(
    kit, host, monkeypatch, capsys
) -> None:
    nvidia_host(monkeypatch, host)
    code, out, err = run_cli(monkeypatch, capsys, FakeAdapter(SlowGpuStart()), "detect")
    assert code == 0 and "Traceback" not in err
    assert "Docker did not answer in time while starting the probe container" in out
    assert "AIRIG_GPU_PROBE_TIMEOUT" in out


def test_forced_profile_with_a_timed_out_probe_refuses_in_one_line(
    kit, host, monkeypatch, capsys
) -> None:
    nvidia_host(monkeypatch, host)
    (kit / ".env").write_text("")
    adapter = FakeAdapter(SlowGpuStart())
    code, _, err = run_cli(monkeypatch, capsys, adapter, "up", "--profile", "gpu-nvidia")
    assert code == 1
    (line,) = error_lines(err)
    assert "Docker did not answer in time" in line
    assert f"→ {PROBE_TIMEOUT_FIX}" in err
    assert not [c for c in adapter.calls if c[0] == "build"]


def test_probe_runs_on_its_own_client_with_a_long_configurable_timeout(
    kit, host, monkeypatch
) -> None:
    nvidia_host(monkeypatch, host)
    queries, probes = base_engine(), base_engine()
    adapter = FakeAdapter(queries, probes)
    choose_profile(load_settings(kit), adapter)
    assert ("probe_sdk", 120.0) in adapter.calls
    assert len(probes.runs) == 1 and queries.runs == []
    monkeypatch.setenv("AIRIG_GPU_PROBE_TIMEOUT", "300")
    choose_profile(load_settings(kit), adapter)
    assert adapter.calls[-1] == ("probe_sdk", 300.0)
    monkeypatch.setenv("AIRIG_GPU_PROBE_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="AIRIG_GPU_PROBE_TIMEOUT"):
        choose_profile(load_settings(kit), adapter)


def test_probe_client_is_made_with_the_probe_timeout(monkeypatch) -> None:
    made: list[dict] = []
    monkeypatch.setattr("docker.from_env", lambda **kwargs: made.append(kwargs) or object())
    docker = Docker(engine_timeout=5.0)
    assert docker.probe_sdk(120.0) is docker.probe_sdk(120.0)
    assert made == [{"timeout": 120.0}]


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (requests.exceptions.ReadTimeout("Read timed out."), "did not answer in time"),
        (requests.exceptions.ConnectionError("Connection aborted."), "lost the connection"),
        (
            APIError("500", explanation="could not find an available, non-overlapping IPv4 pool"),
            "non-overlapping IPv4 pool",
        ),
    ],
)
def test_every_engine_call_of_the_adapter_raises_docker_error(exc, words) -> None:
    engine = FakeDocker()
    engine.networks = engine.volumes = Raises(exc)
    engine.info = Raises(exc).info
    engine.containers = engine.api = Raises(exc)
    docker = Docker()
    docker._sdk = engine
    calls = [
        lambda: docker.ensure_network("ai-network"),
        lambda: docker.remove_network("ai-network"),
        lambda: docker.remove_volumes(["airig-data"]),
        docker.engine_info,
        lambda: docker.containers(label="x"),
        lambda: docker.project_services(["airig-infra"]),
    ]
    for call in calls:
        with pytest.raises(DockerError, match=words) as caught:
            call()
        assert caught.value.hint and "\n" not in caught.value.message


def test_down_with_an_engine_that_times_out_is_one_line(kit, monkeypatch, capsys) -> None:
    engine = FakeDocker()
    engine.networks = Raises(requests.exceptions.ReadTimeout("Read timed out."))
    code, _, err = run_cli(monkeypatch, capsys, FakeAdapter(engine), "down")
    assert code == 1 and "Traceback" not in err
    (line,) = error_lines(err)
    assert "removing the network ai-network: the Docker daemon did not answer in time" in line


def test_up_with_an_engine_that_times_out_in_preflight_is_one_line(
    kit, host, monkeypatch, capsys
) -> None:
    on_host(monkeypatch, host, FakeNvml())
    (kit / ".env").write_text("")
    engine = FakeDocker()
    # the own-ports query: the engine's container list, one call for every project
    engine.api = Raises(requests.exceptions.ReadTimeout("Read timed out."))
    code, _, err = run_cli(monkeypatch, capsys, FakeAdapter(engine), "up", "--profile", "cpu")
    assert code == 1 and "Traceback" not in err
    (line,) = error_lines(err)
    assert "listing containers: the Docker daemon did not answer in time" in line


def test_doctor_turns_an_engine_gone_quiet_into_a_failed_check(
    kit, host, monkeypatch, capsys
) -> None:
    on_host(monkeypatch, host, FakeNvml())
    engine = FakeDocker()
    # the own-ports query: the engine's container list, one call for every project
    engine.api = Raises(requests.exceptions.ReadTimeout("Read timed out."))
    code, out, err = run_cli(monkeypatch, capsys, FakeAdapter(engine), "doctor")
    assert code == 1 and "Traceback" not in err
    assert "listing containers: the Docker daemon did not answer in time" in out


def test_dry_run_without_docker_on_path_is_one_line(kit, host, monkeypatch, capsys) -> None:
    on_host(monkeypatch, host, FakeNvml())
    monkeypatch.setenv("PATH", str(host.dev))  # no docker binary here
    code, _, err = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "--dry-run")
    assert code == 1 and "Traceback" not in err
    assert error_lines(err) == ["✘ the docker command was not found"]


def test_an_engine_error_that_escapes_the_adapter_is_still_one_line(
    kit, monkeypatch, capsys
) -> None:
    adapter = FakeAdapter(base_engine())
    adapter.project_services = Raises(
        requests.exceptions.ConnectionError("Connection refused")
    ).project_services
    code, _, err = run_cli(monkeypatch, capsys, adapter, "status")
    assert code == 1 and "Traceback" not in err
    assert error_lines(err) == ["✘ Docker failed: ConnectionError: Connection refused"]


# ------------------------------------------------------------------ 12: markup
def test_error_printer_shows_engine_text_as_written(kit, monkeypatch, capsys) -> None:
    airig.launcher.console.fail(BRACKETED, "see [/etc/docker/daemon.json]")
    err = capsys.readouterr().err
    assert f"✘ {BRACKETED}" in err and "→ see [/etc/docker/daemon.json]" in err


def test_refusal_quoting_the_engine_reaches_the_user_verbatim(
    kit, host, monkeypatch, capsys
) -> None:
    nvidia_host(monkeypatch, host)
    (kit / ".env").write_text("")
    adapter = FakeAdapter(base_engine(run_error=BRACKETED))
    code, _, err = run_cli(monkeypatch, capsys, adapter, "up", "--profile", "gpu-nvidia")
    assert code == 1 and "Traceback" not in err
    (line,) = error_lines(err)
    assert "capabilities: [[gpu]]" in line and "[/dev/dri/renderD128]" in line


def test_detect_prints_reasons_verbatim(kit, host, monkeypatch, capsys) -> None:
    nvidia_host(monkeypatch, host)
    adapter = FakeAdapter(base_engine(run_error=BRACKETED))
    code, out, _ = run_cli(monkeypatch, capsys, adapter, "detect")
    assert code == 0
    assert "· NVIDIA driver 550.54.14, 1 GPU(s) (NVIDIA GeForce GTX 1060 6GB), but" in out
    assert f"Docker cannot start a container with it: {BRACKETED}" in out


def test_tables_show_foreign_text_verbatim() -> None:
    odd = "[/dev/dri/renderD128] capabilities: [[gpu]] [bold]"
    check = Check("GPU profile", False, odd, f"fix {odd}")
    assert odd in rendered(checks_table([check]))
    row = {"stack": "02-compute", "service": odd, "state": "exited", "health": "",
           "exit_code": 1, "urls": []}  # fmt: skip
    assert odd in rendered(services_table([row]))
    worker = {"name": odd, "alive": False, "classes": ["llm"], "gpu_index": None,
              "warnings": [odd], "resident_models": [odd]}  # fmt: skip
    assert rendered(workers_table([worker])).count(odd) == 3
    gpu = GpuInfo("amd", "Radeon [gfx1100] [/x]", "discrete", pci_address="0000:03:00.0")
    assert "Radeon [gfx1100] [/x]" in rendered_report(HardwareReport(gpus=(gpu,)))


def test_brain_tables_show_task_errors_verbatim() -> None:
    from airig.launcher.cli.tasks import errors_table, tasks_table

    odd = "no such device [/dev/dri/renderD128]"
    task = {"id": "t1", "type": "shell", "task_class": "cpu", "state": "failed",
            "attempt": 1, "worker_id": None, "error": odd}  # fmt: skip
    plan = {"id": "p1", "name": "[/x] plan", "status": "failed", "tasks": [task]}
    text = rendered(tasks_table(plan))
    assert odd in text and "[/x] plan" in text
    assert odd in rendered(errors_table([{"task": "t1", "field": "x", "message": odd}]))


def rendered_report(report: HardwareReport) -> str:
    out = io.StringIO()
    render_table(report, Console(file=out, width=300, color_system=None))
    return out.getvalue()


# ------------------------------------------------------------------ 13: refusals said early
@pytest.mark.parametrize("gpu", ["absent", "refused by the engine"])
def test_dry_run_warns_that_up_would_refuse_the_profile(
    kit, host, monkeypatch, capsys, gpu
) -> None:
    if gpu == "absent":
        on_host(monkeypatch, host, FakeNvml())
        why = "gpu-nvidia was requested by --profile, but no NVIDIA GPU was found."
    else:
        nvidia_host(monkeypatch, host)
        why = f"Docker cannot start a container with it: {BRACKETED}"
    adapter = FakeAdapter(base_engine(run_error=BRACKETED))
    code, out, _ = run_cli(monkeypatch, capsys, adapter, "--dry-run", "--profile", "gpu-nvidia")
    assert code == 0
    (warning,) = [line for line in out.splitlines() if "⚠ up would refuse gpu-nvidia:" in line]
    assert why in warning


def test_detect_refuses_a_forced_profile_exactly_as_up_does(kit, host, monkeypatch, capsys) -> None:
    on_host(monkeypatch, host, FakeNvml())  # no GPU at all
    code, _, detect_err = run_cli(monkeypatch, capsys, FakeAdapter(FakeDocker()), "detect",
                              "--profile", "gpu-nvidia")  # fmt: skip
    assert code == 1
    (kit / ".env").write_text("")
    up_code, _, up_err = run_cli(monkeypatch, capsys, FakeAdapter(FakeDocker()), "up",
                             "--profile", "gpu-nvidia")  # fmt: skip
    assert up_code == 1
    assert (
        error_lines(detect_err)
        == error_lines(up_err)
        == ["✘ gpu-nvidia was requested by --profile, but no NVIDIA GPU was found."]
    )
    code, out, _ = run_cli(monkeypatch, capsys, FakeAdapter(FakeDocker()), "detect", "--json",
                       "--profile", "gpu-nvidia")  # fmt: skip
    assert code == 1 and "no NVIDIA GPU was found" in json.loads(out)["refused"]
    assert run_cli(monkeypatch, capsys, FakeAdapter(FakeDocker()), "detect", "-p", "cpu")[0] == 0


def test_fresh_host_judges_a_forced_gpu_profile_before_building(kit, host, monkeypatch) -> None:
    # No image is local yet, so the first probe cannot run; the engine refuses the GPUs.
    nvidia_host(monkeypatch, host)
    engine = FakeDocker(run_error=NVIDIA_ENGINE_ERROR, images=())
    adapter = FakeAdapter(engine)
    settings = load_settings(kit, {"AIRIG_PROFILE": "gpu-nvidia"})
    launcher = Launcher(settings, adapter, Console(file=io.StringIO()))
    with pytest.raises(HardwareError, match="Docker cannot start a container"):
        launcher.up()
    assert [c for c in adapter.calls if c[0] in ("pull", "build")] == [("pull", BASE)]
    assert engine.runs[0]["image"] == BASE


# ------------------------------------------------------------------ 14: which cards get workers
def test_a_card_nvml_cannot_see_gets_no_worker_and_is_reported(host) -> None:
    host.pci("0000:01:00.0", NVIDIA, 0x1C03, driver="nvidia")
    host.pci("0000:02:00.0", NVIDIA, 0x2504, driver="vfio-pci")  # handed to a VM
    report = detect(host.sys, host.dev, nvml=FakeNvml([gtx1060(1)]), amdsmi=None,
                    docker_client=FakeDocker(), probe_image=PROBE_IMAGE)  # fmt: skip
    assert [slot.index for slot in gpu_slots(report, "gpu-nvidia")] == [0]
    decision = decide_profile(report)
    assert decision.profile == "gpu-nvidia"
    assert "1 GPU(s) (NVIDIA GeForce GTX 1060 6GB)" in decision.reasons[0]
    assert (
        "NVIDIA GPU at 0000:02:00.0 skipped: NVML does not see it (kernel driver: vfio-pci), "
        "so no worker can use it"
    ) in decision.reasons


def test_a_wide_pci_domain_is_one_card_not_two(host) -> None:
    # Intel VMD: sysfs names the domain 10000, NVML 00010000.
    host.pci("10000:e1:00.0", NVIDIA, 0x1C03, driver="nvidia")
    card = gtx1060(1)
    card.bus_id = "00010000:E1:00.0"
    report = detect(host.sys, host.dev, nvml=FakeNvml([card]), amdsmi=None,
                    docker_client=FakeDocker(), probe_image=PROBE_IMAGE)  # fmt: skip
    (gpu,) = report.gpus
    assert (gpu.pci_address, gpu.index, gpu.kernel_driver) == ("10000:e1:00.0", 0, "nvidia")
    assert [slot.index for slot in gpu_slots(report, "gpu-nvidia")] == [0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00010000:E1:00.0", "10000:e1:00.0"),
        ("10000:e1:00.0", "10000:e1:00.0"),
        ("00000000:0A:00.0", "0000:0a:00.0"),
        ("0001:01:00.0", "0001:01:00.0"),
    ],
)
def test_normalize_address_keeps_the_whole_domain(raw: str, expected: str) -> None:
    assert normalize_address(raw) == expected


# ------------------------------------------------------------------ doctor redaction
def test_bug_report_redacts_secret_keys_and_url_credentials() -> None:
    values = {
        "DB_PASSWORD": "hunter2",
        "SMTP_PASS": "hunter2",
        "AIRIG_SECRET_SAUCE": "hunter2",
        "REGISTRY_CREDENTIALS": "hunter2",
        "HF_AUTH": "hunter2",
        "AIRIG_PIP_INSTALL_ARGS": "--index-url https://me:hunter2@pypi.example/simple",
        "AIRIG_MIRROR": "https://hunter2@mirror.example/x",
        "AIRIG_BIND_ADDRESS": "127.0.0.1",
        "BRAIN_URL": "http://me:hunter2@brain:8080/v1",
        "AIRIG_BRAIN_PUBLIC_URL": "https://brain.example.lan",
    }
    settings = redacted_env(values)
    assert settings["AIRIG_PIP_INSTALL_ARGS"] == "<redacted>"
    assert settings["AIRIG_MIRROR"] == "<redacted>"  # not a knob the kit declares
    assert settings["AIRIG_BIND_ADDRESS"] == "127.0.0.1"
    assert settings["BRAIN_URL"] == "http://me:<redacted>@brain:8080/v1"  # a safe knob's URL
    assert settings["AIRIG_BRAIN_PUBLIC_URL"] == "https://brain.example.lan"
    check = Check("registry", False, "cannot reach http://me:hunter2@registry:5000/v2")
    data = bundle([check], values, {"services_error": "pull ftp://a:hunter2@b failed"})
    assert "hunter2" not in json.dumps(data)


def test_doctor_json_leaks_no_password(kit, host, monkeypatch, capsys) -> None:
    on_host(monkeypatch, host, FakeNvml())
    (kit / ".env").write_text(
        "DB_PASSWORD=hunter2\nAIRIG_PIP_INSTALL_ARGS=--index-url https://me:hunter2@pypi/simple\n"
    )
    _, out, err = run_cli(monkeypatch, capsys, FakeAdapter(FakeDocker()), "doctor", "--json")
    assert "Traceback" not in err
    data = json.loads(out)
    assert data["settings"]["DB_PASSWORD"] == "<redacted>"
    assert "hunter2" not in out


# Secrets whose key names no list of words catches, a secret in a URL's path, and the
# launcher's own secrets: the bug report shows none of them.
UNSAFE = {
    "SESSION_COOKIE": "hunter2",
    "PRIVATE_PEM": "-----BEGIN hunter2",
    "GITHUB_PAT": "ghp_hunter2",
    "SIGNING_SALT": "hunter2",
    "ALERTS_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/hunter2",
    "AIRIG_PIP_INSTALL_ARGS": "--extra-index-url https://pypi.fury.io/hunter2/me/",
    "AIRIG_JOIN_TOKEN": "hunter2",
    "BRAIN_ADMIN_TOKEN": "hunter2",
    "WORKER_BOOTSTRAP_TOKEN": "hunter2",
}


def test_the_bug_report_shows_only_values_the_kit_knows_are_safe() -> None:
    safe = {"AIRIG_BIND_ADDRESS": "0.0.0.0", "OLLAMA_PORT": "11434", "AIRIG_PROFILE": "cpu"}
    report = bundle([], {**UNSAFE, **safe}, {})
    assert "hunter2" not in json.dumps(report)
    assert report["settings"] == {**dict.fromkeys(UNSAFE, "<redacted>"), **safe}


def test_doctor_json_shows_no_value_of_a_key_it_does_not_know(kit, host, monkeypatch, capsys):
    on_host(monkeypatch, host, FakeNvml())
    unsafe = {k: v for k, v in UNSAFE.items() if k != "AIRIG_JOIN_TOKEN"}  # needs its URL
    (kit / ".env").write_text("".join(f"{key}={value}\n" for key, value in unsafe.items()))
    _, out, err = run_cli(monkeypatch, capsys, FakeAdapter(FakeDocker()), "doctor", "--json")
    assert "Traceback" not in err
    settings = json.loads(out)["settings"]
    assert {key: settings[key] for key in unsafe} == dict.fromkeys(unsafe, "<redacted>")
    assert "hunter2" not in out and settings["AIRIG_NETWORK"] == "ai-network"


# ------------------------------------------------------------------ issue 13: images that fit
def seed_rig(monkeypatch: pytest.MonkeyPatch, host: FakeHost, driver: str = "535.183.01",
             capability: tuple[int, int] = (6, 1), cards: int = 5) -> None:  # fmt: skip
    """The seed's rig: five GTX 1060 (compute capability 6.1) on driver 535."""
    nvml_cards = []
    for bus in range(1, cards + 1):
        host.pci(f"0000:{bus:02x}:00.0", NVIDIA, 0x1C03, driver="nvidia")
        card = gtx1060(bus)
        card.capability = capability
        nvml_cards.append(card)
    on_host(monkeypatch, host, FakeNvml(nvml_cards, driver=driver))


def test_dry_run_on_the_seed_rig_picks_a_comfyui_for_pascal_and_says_why(
    kit, host, monkeypatch, capsys
) -> None:
    seed_rig(monkeypatch, host)
    code, out, err = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "--dry-run")
    assert code == 0, err
    (comfy,) = [line for line in out.splitlines() if "Image comfyui" in line]
    assert "(GPU): yanwk/comfyui-boot:cu126-slim" in comfy and "fits all 5 GPUs" in comfy
    # Whisper's CUDA 12.4.1 image: its base accepts GeForce on the 535 branch
    (whisper,) = [line for line in out.splitlines() if "Image whisper" in line]
    assert "(GPU): ghcr.io/speaches-ai/speaches:0.8.3-cuda-12.4.1" in whisper
    assert not [line for line in out.splitlines() if "⚠" in line]
    (compute_up,) = [line for line in out.splitlines() if "airig-compute up" in line]
    assert f"--env-file {kit / '.env'} --env-file {kit / '.airig' / 'host.env'}" in compute_up
    assert "compute.cpu-fallback.yaml" not in compute_up


def test_dry_run_on_a_driver_no_whisper_build_accepts_says_why_and_moves_it_to_cpu(
    kit, host, monkeypatch, capsys
) -> None:
    seed_rig(monkeypatch, host, "545.29.06")  # between the 12.4.1 base's 535 and 550
    code, out, err = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "--dry-run")
    assert code == 0, err
    (warning,) = [line for line in out.splitlines() if "⚠" in line]
    assert warning.strip().startswith("⚠ Whisper runs on CPU")
    assert "GTX 1060" in warning and "6.1" in warning and "545.29.06" in warning
    # the exact commands: both env files, and the overlay that moves Whisper to its CPU image
    (compute_up,) = [line for line in out.splitlines() if "airig-compute up" in line]
    assert f"--env-file {kit / '.env'} --env-file {kit / '.airig' / 'host.env'}" in compute_up
    assert str(kit / ".airig" / "compute.cpu-fallback.yaml") in compute_up


@pytest.mark.parametrize(("driver", "tag"), [("570.124.06", "cu128-slim"),
                                             ("580.95.05", "cu130-slim-v2")])  # fmt: skip
def test_detect_on_a_blackwell_rig_picks_a_build_with_its_kernels(
    kit, host, monkeypatch, capsys, driver, tag
) -> None:
    seed_rig(monkeypatch, host, driver, (12, 0), cards=1)
    code, out, _ = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "detect", "--json")
    assert code == 0
    images = {i["service"]: i for i in json.loads(out)["images"]}
    assert images["comfyui"]["image"] == f"yanwk/comfyui-boot:{tag}"
    assert images["comfyui"]["device"] == "gpu" and images["comfyui"]["warning"] is None


def test_a_pin_that_cannot_run_stops_up_before_anything_starts(
    kit, host, monkeypatch, capsys
) -> None:
    seed_rig(monkeypatch, host)
    env = (kit / ".env.example").read_text().replace("change-me", "s3cret")
    pinned = "COMFYUI_IMAGE_NVIDIA=yanwk/comfyui-boot:cu130-slim-v2"
    (kit / ".env").write_text(env.replace("COMFYUI_IMAGE_NVIDIA=", pinned))
    adapter = FakeAdapter(base_engine())
    code, out, err = run_cli(monkeypatch, capsys, adapter, "up")
    assert code == 1
    (line,) = error_lines(err)
    assert line == (
        "✘ COMFYUI_IMAGE_NVIDIA=yanwk/comfyui-boot:cu130-slim-v2 cannot run on GPU 0 NVIDIA "
        "GeForce GTX 1060 6GB (compute capability 6.1, driver 535.183.01): it needs driver ≥ "
        "580.65.06; has no kernels for compute capability 6.1"
    )
    assert "empty COMFYUI_IMAGE_NVIDIA in .env" in err
    assert [c for c in adapter.calls if c[0] in ("build", "up", "network")] == []
    assert not (kit / ".airig").exists()  # nothing written, nothing started
    # detect says the same and exits ≠ 0; the dry run shows it and starts nothing
    code, out, _ = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "detect")
    assert code == 1 and "✘ COMFYUI_IMAGE_NVIDIA=" in out


def test_a_forced_backend_the_rig_cannot_serve_is_one_refusal_and_exit_1(
    kit, host, monkeypatch, capsys
) -> None:
    """OLLAMA_BACKEND=rocm on the seed's NVIDIA rig: `detect` and `up` say it in one ✘
    line; nothing starts."""
    seed_rig(monkeypatch, host)
    env = (kit / ".env.example").read_text().replace("change-me", "s3cret")
    (kit / ".env").write_text(env.replace("OLLAMA_BACKEND=auto", "OLLAMA_BACKEND=rocm"))
    code, out, _ = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "detect")
    assert code == 1
    (refused,) = [line for line in out.splitlines() if "✘" in line]
    assert refused.startswith("✘ OLLAMA_BACKEND=rocm in .env, but this host cannot serve it")
    adapter = FakeAdapter(base_engine())
    code, _, err = run_cli(monkeypatch, capsys, adapter, "up")
    assert code == 1
    (line,) = error_lines(err)
    assert line.startswith("✘ OLLAMA_BACKEND=rocm in .env")
    assert [c for c in adapter.calls if c[0] in ("build", "up", "network")] == []


def test_a_forced_cpu_backend_is_said_by_detect(kit, host, monkeypatch, capsys) -> None:
    seed_rig(monkeypatch, host)
    env = (kit / ".env.example").read_text().replace("change-me", "s3cret")
    (kit / ".env").write_text(env.replace("WHISPER_BACKEND=auto", "WHISPER_BACKEND=cpu"))
    code, out, _ = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "detect", "--json")
    assert code == 0
    images = {i["service"]: i for i in json.loads(out)["images"]}
    assert images["whisper"]["device"] == "cpu" and images["whisper"]["backend"] == "cpu"
    assert "WHISPER_BACKEND=cpu in .env" in images["whisper"]["why"]
    assert images["comfyui"]["backend"] == "cuda"  # the others still pick to fit


def test_an_unknown_backend_is_one_line_and_exit_not_0(kit, host, monkeypatch, capsys) -> None:
    seed_rig(monkeypatch, host)
    env = (kit / ".env.example").read_text().replace("change-me", "s3cret")
    (kit / ".env").write_text(env.replace("OLLAMA_BACKEND=auto", "OLLAMA_BACKEND=metal"))
    code, _, err = run_cli(monkeypatch, capsys, FakeAdapter(base_engine()), "detect")
    assert code != 0
    (line,) = error_lines(err)
    assert "OLLAMA_BACKEND" in line and "metal" in line
    assert "Traceback" not in err
