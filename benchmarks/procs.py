"""Real brain and worker processes on 127.0.0.1 for the benchmarks, always stopped after.

Environment as documented in ``airig/brain/settings.py`` and ``airig/worker/settings.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
ADMIN = "bench-admin-token"
BOOTSTRAP = "bench-bootstrap-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _env(extra: dict[str, str], code: Path = REPO) -> dict[str, str]:
    drop = ("BRAIN_", "WORKER_", "OLLAMA_", "COMFYUI_", "WHISPER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PYTHONPATH": str(code), **extra}


def spawn(module: str, env: dict[str, str], log: Path, code: Path = REPO) -> subprocess.Popen:
    """``python -m module`` from the tree at ``code`` (this checkout, or an older one)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module], env=_env(env, code), cwd=code,
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def stop(process: subprocess.Popen, timeout: float = 10.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


class Brain:
    def __init__(self, root: Path, extra: dict[str, str] | None = None, code: Path = REPO) -> None:
        self.root, self.port, self.code = root, free_port(), code
        self.env = {
            "BRAIN_DB": str(root / "state" / "brain.db"),
            "BRAIN_RESULTS_DIR": str(root / "results"),
            "BRAIN_EVENTS_LOG": str(root / "events.jsonl"),
            "BRAIN_ADMIN_TOKEN": ADMIN, "WORKER_BOOTSTRAP_TOKEN": BOOTSTRAP,
            "BRAIN_LISTEN_HOST": "127.0.0.1", "BRAIN_LISTEN_PORT": str(self.port),
            **(extra or {}),
        }  # fmt: skip
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 30.0) -> None:
        self.process = spawn("airig.brain", self.env, self.root / "brain.log", self.code)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError((self.root / "brain.log").read_text()[-2000:])
            try:
                if requests.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError("the brain did not answer /health in time")

    def worker_env(self, name: str, classes: str = "cpu") -> dict[str, str]:
        return {
            "BRAIN_URL": self.url, "WORKER_BOOTSTRAP_TOKEN": BOOTSTRAP, "WORKER_NAME": name,
            "WORKER_CLASSES": classes,
            "WORKER_STATE_FILE": str(self.root / f"{name}.state.json"),
            "WORKER_WORK_DIR": str(self.root / f"{name}.work"),
            "DATA_DIR": str(self.root / "data"),
        }  # fmt: skip

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
