"""`models list|verify|pull`: the exact one-off container runs, and the exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from python_on_whales.exceptions import DockerException
from typer.testing import CliRunner

from airig.launcher.cli.models import build_models_app


def ev(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


class FakeCompose:
    def __init__(self, outputs: dict[str, tuple[list[bytes], int]]) -> None:
        self.outputs = outputs
        self.calls: list[tuple[str, dict]] = []

    def run(self, service: str, **kwargs: object) -> Iterator[tuple[str, bytes]]:
        self.calls.append((service, kwargs))
        lines, code = self.outputs.get(service, ([], 0))

        def stream() -> Iterator[tuple[str, bytes]]:
            yield "stderr", b"Container starting\n"
            for line in lines:
                yield "stdout", line
            if code:
                raise DockerException(["docker", "compose", "run"], code, b"", b"boom\n")

        return stream()


class FakeClient:
    def __init__(self, outputs: dict[str, tuple[list[bytes], int]] | None = None) -> None:
        self.compose = FakeCompose(outputs or {})


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1"})


def test_verify_runs_each_init_service_with_verify_only(runner: CliRunner) -> None:
    client = FakeClient(
        {"ollama-init": ([ev(event="verified", service="ollama", model="m", size=5, files=2)], 0)}
    )
    result = runner.invoke(build_models_app(lambda: client), ["verify"])
    assert result.exit_code == 0, result.output
    service, kwargs = client.compose.calls[0]
    assert [call[0] for call in client.compose.calls] == [
        "ollama-init",
        "whisper-init",
        "comfyui-init",
    ]
    assert (service, kwargs["entrypoint"], kwargs["command"]) == (
        "ollama-init",
        "python",
        ["-m", "airig.provision", "ollama", "--verify-only"],
    )
    assert kwargs["remove"] and kwargs["stream"] and not kwargs["tty"]
    assert kwargs["dependencies"] is False
    assert kwargs["envs"] == {"AIRIG_SERVER_WAIT_SECONDS": "30"}
    assert "✔" in result.output


def test_verify_exits_1_naming_the_bad_model(runner: CliRunner) -> None:
    failed = ev(event="failed", service="ollama", model="qwen", error="ollama model 'qwen': bad")
    client = FakeClient({"ollama-init": ([failed], 1)})
    result = runner.invoke(build_models_app(lambda: client), ["verify", "-s", "ollama"])
    assert result.exit_code == 1
    assert "models not verified: ollama qwen" in result.output
    assert "Traceback" not in result.output


def test_container_failure_without_events_is_a_docker_error(runner: CliRunner) -> None:
    client = FakeClient({"whisper-init": ([], 1)})
    result = runner.invoke(build_models_app(lambda: client), ["verify", "-s", "whisper"])
    assert result.exit_code == 1
    assert "whisper-init failed: boom" in result.output


def test_pull_passes_models_for_one_service(runner: CliRunner) -> None:
    client = FakeClient()
    app = build_models_app(lambda: client)
    result = runner.invoke(app, ["pull", "a:1b", "b", "--service", "ollama"])
    assert result.exit_code == 0, result.output
    [(service, kwargs)] = client.compose.calls
    assert service == "ollama-init"
    assert kwargs["command"][3:] == ["--pull", "--model", "a:1b", "--model", "b"]


def test_pull_with_models_needs_one_service(runner: CliRunner) -> None:
    result = runner.invoke(build_models_app(FakeClient), ["pull", "a:1b"])
    assert result.exit_code == 1
    assert "exactly one --service" in result.output


def test_list_renders_the_listing(runner: CliRunner) -> None:
    listed = ev(event="listed", service="comfyui", model="checkpoints/x.safetensors", size=9,
                configured=True, present=True)  # fmt: skip
    client = FakeClient({"comfyui-init": ([listed], 0)})
    result = runner.invoke(build_models_app(lambda: client), ["list", "-s", "comfyui"])
    assert result.exit_code == 0, result.output
    assert client.compose.calls[0][1]["command"][-1] == "--list"
    assert "checkpoints/x.safetensors" in result.output and "yes, on disk" in result.output
