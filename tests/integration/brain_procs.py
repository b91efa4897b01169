"""Real brain and worker processes on 127.0.0.1 for the integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "integration-admin-token"
BOOTSTRAP_TOKEN = "integration-bootstrap-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Short timers so failures are detected in seconds, not minutes.
FAST_BRAIN = {
    "BRAIN_LEASE_S": "2",
    "BRAIN_REAPER_INTERVAL_S": "0.2",
    "BRAIN_CLAIM_WAIT_S": "2",
    "BRAIN_RETRY_INITIAL_S": "0.1",
    "BRAIN_RETRY_CAP_S": "0.5",
}
# A worker in its container is uid 10001 with every capability dropped; as root (CI runs
# pytest as root) the same process without capabilities is what the kernel's checks see:
# no CAP_SYS_PTRACE, no CAP_DAC_*. Not root: the process has none already.
WITHOUT_CAPABILITIES = (
    ("setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
     "--no-new-privs", "--")
    if os.geteuid() == 0 else ()
)  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except requests.RequestException:
            value = None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _clean_env() -> dict[str, str]:
    drop = ("BRAIN_", "WORKER_", "OLLAMA_", "COMFYUI_", "WHISPER_", "DATA_DIR")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Proc:
    name: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 10) -> int | None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode


def spawn(
    module: str,
    name: str,
    env: dict[str, str],
    log_dir: Path,
    args: tuple[str, ...] = (),
    wrapper: tuple[str, ...] = (),
) -> Proc:
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [*wrapper, sys.executable, "-m", module, *args], env={**_clean_env(), **env},
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return Proc(name, process, log_path)


@dataclass
class Cluster:
    """One brain (restartable on the same state) and any number of workers."""

    root: Path
    brain_env: dict[str, str] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    brain: Proc | None = None
    workers: dict[str, Proc] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_brain(self) -> Proc:
        env = {
            "BRAIN_DB": str(self.root / "state" / "brain.db"),
            "BRAIN_RESULTS_DIR": str(self.root / "results"),
            "BRAIN_ADMIN_TOKEN": ADMIN_TOKEN, "WORKER_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
            "BRAIN_LISTEN_HOST": "127.0.0.1", "BRAIN_LISTEN_PORT": str(self.port),
            **FAST_BRAIN, **self.brain_env,
        }  # fmt: skip
        self.brain = spawn("airig.brain", "brain", env, self.root)
        wait_until(self._healthy, 20, f"the brain to answer\n{self.brain.log()}")
        return self.brain

    def _healthy(self) -> bool:
        if self.brain and self.brain.process.poll() is not None:
            raise AssertionError(f"brain exited:\n{self.brain.log()}")
        return requests.get(f"{self.url}/health", timeout=1).status_code == 200

    def start_worker(
        self,
        name: str,
        classes: str = "cpu",
        proc_name: str = "",
        wait: bool = True,
        capless: bool = False,
        **extra: str,
    ) -> Proc:
        """``capless``: without capabilities, as in its container (pytest may run as root)."""
        env = {
            "BRAIN_URL": self.url, "WORKER_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
            "WORKER_NAME": name, "WORKER_CLASSES": classes,
            "WORKER_STATE_FILE": str(self.root / f"{name}.state.json"),
            "WORKER_WORK_DIR": str(self.root / f"{name}.work"),
            "DATA_DIR": str(self.root / "data"), "WORKER_RETRY_CAP_S": "0.5",
            "WORKER_STOP_GRACE_S": "2", **self.services, **extra,
        }  # fmt: skip
        (self.root / "data").mkdir(exist_ok=True)
        wrapper = WITHOUT_CAPABILITIES if capless else ()
        proc = spawn("airig.worker", proc_name or name, env, self.root, wrapper=wrapper)
        self.workers[proc_name or name] = proc
        if wait:
            wait_until(lambda: self.worker_alive(name), 20, f"worker {name} to register")
        return proc

    def worker_alive(self, name: str) -> bool:
        workers = self.get("/v1/workers")["workers"]
        return any(w["name"] == name and w["alive"] for w in workers)

    def get(self, path: str) -> Any:
        answer = requests.get(f"{self.url}{path}", headers=ADMIN, timeout=10)
        answer.raise_for_status()
        return answer.json()

    def submit(self, plan: dict) -> dict:
        answer = requests.post(f"{self.url}/v1/plans", headers=ADMIN, json=plan, timeout=10)
        assert answer.status_code == 201, answer.text
        return answer.json()

    def wait_plan(self, plan_id: str, timeout: float) -> dict:
        def finished() -> dict | None:
            view = self.get(f"/v1/plans/{plan_id}")
            return view if view["status"] != "running" else None

        return wait_until(finished, timeout, f"plan {plan_id} to finish\n{self.logs()}", 0.2)

    def completions(self, plan_id: str) -> dict[str, int]:
        events = self.get(f"/v1/plans/{plan_id}/events")["events"]
        counts: dict[str, int] = {}
        for event in events:
            if event["event_type"] == "task_completed":
                counts[event["task_id"]] = counts.get(event["task_id"], 0) + 1
        return counts

    def logs(self) -> str:
        procs = [self.brain, *self.workers.values()]
        return "\n".join(f"--- {p.name}\n{p.log()[-3000:]}" for p in procs if p)

    def stop(self) -> None:
        """SIGTERM everything at once (workers first), then wait for each."""
        procs = [p for p in [*self.workers.values(), self.brain] if p]
        for proc in procs:
            if proc.process.poll() is None:
                proc.process.terminate()
        for proc in procs:
            proc.stop(timeout=8)
