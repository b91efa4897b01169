"""Run the real gateway (``python -m airig.gateway``) as a process against the provider
stand-in, for integration tests (no Docker):

    from standins.provider.gateway import gateway_base_url, start_gateway
    provider = standins("provider")
    gw = start_gateway(tmp_path / "gw", "anthropic", gateway_base_url("anthropic", provider.url))
    requests.post(gw.url + "/v1/complete", headers=gw.headers, json={...})
    gw.log(); gw.stop()

The key goes in a file (as in Compose: AIRIG_GATEWAY_KEY_FILE), or with ``key_in="env"``
in AIRIG_GATEWAY_API_KEY. Variables starting AIRIG_GATEWAY_, OPENAI_ and ANTHROPIC_ are
removed from the inherited environment so a developer's shell cannot reach a real API.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from standins.conftest_helpers import free_port
from standins.provider.control import DEFAULT_KEY

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "gateway-test-token-0123456789"
MODELS = {"openai": "gpt-4.1-mini", "anthropic": "claude-sonnet-5-5"}
_SCRUBBED = ("AIRIG_GATEWAY_", "OPENAI_", "ANTHROPIC_")


def gateway_base_url(provider: str, standin_url: str) -> str:
    """AIRIG_GATEWAY_BASE_URL for the stand-in: the openai client appends
    /chat/completions to a URL ending /v1, the anthropic client /v1/messages to the host."""
    return standin_url + "/v1" if provider == "openai" else standin_url


@dataclass
class GatewayProcess:
    url: str
    port: int
    token: str
    process: subprocess.Popen
    log_path: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_gateway(
    root: Path,
    provider: str,
    base_url: str,
    key: str = DEFAULT_KEY,
    model: str | None = None,
    token: str = TOKEN,
    key_in: str = "file",
    env: dict[str, str] | None = None,
    port: int | None = None,
    timeout: float = 120.0,
) -> GatewayProcess:
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED)}
    key_file = root / "provider_key"
    run_env = {
        **clean,
        "PYTHONUNBUFFERED": "1",
        "AIRIG_GATEWAY_PORT": str(port),
        "AIRIG_GATEWAY_PROVIDER": provider,
        "AIRIG_GATEWAY_MODEL": model or MODELS[provider],
        "AIRIG_GATEWAY_BASE_URL": base_url,
        "AIRIG_GATEWAY_TOKEN": token,
        "AIRIG_GATEWAY_KEY_FILE": str(key_file),
        "AIRIG_GATEWAY_TIMEOUT_S": "10",
    }
    if key_in == "file":
        key_file.write_text(key + "\n")
        key_file.chmod(0o600)
    else:
        key_file.unlink(missing_ok=True)
        run_env["AIRIG_GATEWAY_API_KEY"] = key
    run_env.update(env or {})
    log_path = root / "gateway.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "airig.gateway"],
            cwd=ROOT,
            env=run_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    gateway = GatewayProcess(f"http://127.0.0.1:{port}", port, token, process, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gateway exited {process.returncode}:\n{gateway.log()}")
        try:
            with urllib.request.urlopen(gateway.url + "/health", timeout=1):
                return gateway
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    gateway.stop()
    raise RuntimeError(f"gateway did not answer in {timeout}s:\n{gateway.log()}")
