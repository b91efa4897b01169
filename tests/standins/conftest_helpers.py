"""Start the stand-in servers as host processes for integration tests.

    from standins.conftest_helpers import standins  # noqa: F401  (the fixture)

    def test_x(standins):
        ollama = standins("ollama", env={"STANDIN_MODEL_BYTES": "4096"})
        requests.get(ollama.url + "/api/tags")

`start_standin(name, root, env)` is the plain function under the fixture; the fixture
stops every server it started at teardown. Each server listens on a free 127.0.0.1
port and is polled until it answers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

STANDINS_DIR = Path(__file__).resolve().parent
NAMES = ("ollama", "comfyui", "whisper", "filehost", "provider")
# The path each server answers on once it is ready.
READY_PATHS = {
    "ollama": "/",
    "comfyui": "/system_stats",
    "whisper": "/health",
    "filehost": "/health",
    "provider": "/health",
}
# Stand-in knobs that leak in from the caller's environment would change behaviour.
_SCRUBBED_PREFIXES = (
    "STANDIN_",
    "OLLAMA_",
    "HF_",
    "WHISPER__",
    "CLI_ARGS",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)
# What the images add to the command line: the ComfyUI stand-in imitates
# yanwk/comfyui-boot:cpu, whose CLI_ARGS is "--cpu" (without it ComfyUI does not start).
DEFAULT_ARGS = {"comfyui": ["--cpu"]}


@dataclass
class StandIn:
    name: str
    url: str
    port: int
    root: Path
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(standin: StandIn, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if standin.process.poll() is not None:
            raise RuntimeError(f"{standin.name} stand-in exited:\n{standin.log()}")
        try:
            with urllib.request.urlopen(standin.url + READY_PATHS[standin.name], timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    standin.stop()
    raise RuntimeError(f"{standin.name} stand-in did not answer in {timeout}s:\n{standin.log()}")


def start_standin(
    name: str,
    root: Path,
    env: dict[str, str] | None = None,
    timeout: float = 10.0,
    args: list[str] | None = None,
    port: int | None = None,
) -> StandIn:
    """Start stand-in `name` with its data under `root`; returns once it answers.
    `args` are added to the command line (default DEFAULT_ARGS[name]). `port`: a given
    one (a restart where a client already points), else a free one."""
    if name not in NAMES:
        raise ValueError(f"unknown stand-in {name!r}; one of {NAMES}")
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    full_env = {**clean, "PYTHONUNBUFFERED": "1", **(env or {})}
    log_path = root.parent / f"{root.name}.{name}.log"
    command = [
        sys.executable,
        str(STANDINS_DIR / name / "server.py"),
        "--port",
        str(port),
        "--root",
        str(root),
    ]
    command += ["--listen", "127.0.0.1"] if name == "comfyui" else ["--host", "127.0.0.1"]
    command += DEFAULT_ARGS.get(name, []) if args is None else args
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    standin = StandIn(name, f"http://127.0.0.1:{port}", port, root, process, log_path)
    _wait_ready(standin, timeout)
    return standin


def docker_available() -> bool:
    """Whether a Docker engine answers (docker-marked tests skip with the reason if not)."""
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def standins(tmp_path: Path) -> Iterator[Callable[..., StandIn]]:
    """Factory fixture: standins(name, env=None, root=None, args=None) -> StandIn; all are stopped
    at teardown. The default root is tmp_path/<name>."""
    started: list[StandIn] = []

    def start(
        name: str,
        env: dict[str, str] | None = None,
        root: Path | None = None,
        args: list[str] | None = None,
    ) -> StandIn:
        standin = start_standin(name, root or tmp_path / name, env, args=args)
        started.append(standin)
        return standin

    yield start
    for standin in started:
        standin.stop()
