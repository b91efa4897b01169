"""The compute services as the brain sees them over ai-network: answering, and on the
GPU the launcher gave them. What holds here becomes an alert (``alerts.py``), so a user
whose ComfyUI crash-loops or whose Ollama quietly runs on the CPU is told without looking.

The brain has no Docker socket (it is hardened, and a socket would be root on the host),
so it cannot see restart counts; a service that fails ``down_after`` probes in a row is
down or restarting, which is what a crash loop looks like from the network. ``triage``
on the host gives the exit code and log lines.

Probes run on their own thread with no database lock held: a slow service never delays
a claim. ``holding`` is read by the alert pass; ``outages`` by the placement, which holds
a down service's tasks back until it answers again (``scheduling/placement.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from airig.common.gpu_use import comfyui_cpu_device, ollama_cpu_models

log = logging.getLogger(__name__)

# kind -> (health path, the path whose answer says where it runs, or None). A health
# path counts as answered on any 2xx, whatever its body: speaches' /health is the plain
# text `OK` (v0.8.3 src/speaches/routers/misc.py, `Response(status_code=200,
# content="OK")`). Only a placement answer is read as JSON.
PATHS = {
    "ollama": ("/api/version", "/api/ps"),
    "comfyui": ("/system_stats", "/system_stats"),
    "whisper": ("/health", None),
}


@dataclass(frozen=True)
class Target:
    name: str  # ollama, comfyui, whisper
    url: str
    on_gpu: bool  # the launcher placed it on a GPU (AIRIG_GPU_SERVICES)
    backend: str = ""  # the GPU library it was placed on (cuda, rocm, vulkan, xpu), if said


def parse_targets(spec: str, gpu_services: str) -> tuple[Target, ...]:
    """``ollama=http://ollama:11434,comfyui=http://comfyui:8188`` and ``comfyui,ollama``,
    each GPU service optionally with its backend: ``comfyui=xpu,ollama=vulkan``."""
    pairs = (s.strip().partition("=") for s in gpu_services.split(",") if s.strip())
    on_gpu = {name.strip(): backend.strip() for name, _, backend in pairs}
    targets = []
    for item in spec.split(","):
        name, _, url = item.strip().partition("=")
        if not item.strip():
            continue
        if name not in PATHS or not url.startswith(("http://", "https://")):
            raise ValueError(
                f"BRAIN_PROBE_SERVICES item {item.strip()!r}: want NAME=http://host:port "
                f"with NAME one of {', '.join(PATHS)}"
            )
        targets.append(Target(name, url.rstrip("/"), name in on_gpu, on_gpu.get(name, "")))
    return tuple(targets)


Getter = Callable[[str, float], str]  # url, timeout -> the 2xx body's text; raises else


def _get_text(url: str, timeout_s: float) -> str:
    answer = requests.get(url, timeout=timeout_s)
    if not 200 <= answer.status_code < 300:
        raise requests.HTTPError(f"{answer.status_code} {answer.reason} for {url}", response=answer)
    return answer.text


def _placement(text: str) -> Any:
    """A placement answer as JSON; None when it is not JSON, so the probe says nothing
    about where the service runs rather than calling an answering service down."""
    try:
        return json.loads(text)
    except ValueError:
        log.warning("probe: a placement answer that is not JSON: %.80r", text)
        return None


class ServiceProbes:
    def __init__(
        self,
        targets: tuple[Target, ...],
        down_after: int = 3,
        timeout_s: float = 5.0,
        get: Getter = _get_text,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.targets = targets
        self.down_after = down_after
        self.timeout_s = timeout_s
        self._get = get
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._failing_since: dict[str, float] = {}  # the first failed probe of the run
        self._last_error: dict[str, str] = {}
        self._cpu: dict[str, list[str]] = {}
        self._backend = {t.name: t.backend for t in targets}

    def probe_once(self) -> None:
        for target in self.targets:
            health, placement = PATHS[target.name]
            try:
                body = self._get(target.url + health, self.timeout_s)
                where = None
                if target.on_gpu and placement:
                    same = placement == health
                    where = _placement(
                        body if same else self._get(target.url + placement, self.timeout_s)
                    )
            except requests.RequestException as exc:
                with self._lock:
                    self._failures[target.name] = self._failures.get(target.name, 0) + 1
                    self._failing_since.setdefault(target.name, self._clock())
                    self._last_error[target.name] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            evidence = self._cpu_evidence(target, where) if target.on_gpu else []
            with self._lock:
                self._failures[target.name] = 0
                self._failing_since.pop(target.name, None)
                self._cpu[target.name] = evidence

    @staticmethod
    def _cpu_evidence(target: Target, answer: Any) -> list[str]:
        if not isinstance(answer, dict):
            return []
        if target.name == "ollama":
            return ollama_cpu_models(m for m in answer.get("models") or () if isinstance(m, dict))
        if target.name == "comfyui":
            return comfyui_cpu_device(d for d in answer.get("devices") or () if isinstance(d, dict))
        return []

    def outages(self) -> dict[str, tuple[float, str]]:
        """The services down now (``down_after`` probes in a row failed): name -> (the
        wall-clock time of the run's first failed probe, why)."""
        with self._lock:
            return {
                name: (self._failing_since.get(name, self._clock()),
                       f"{n} probes in a row failed: {self._last_error.get(name)}")
                for name, n in self._failures.items()
                if n >= self.down_after
            }  # fmt: skip

    def holding(self) -> dict[tuple[str, str], str]:
        """Alerts that hold now: (kind, service) -> message."""
        found: dict[tuple[str, str], str] = {}
        with self._lock:
            for name, n in self._failures.items():
                if n >= self.down_after:
                    found[("service_down", name)] = (
                        f"{n} probes in a row failed ({self._last_error.get(name)}); "
                        f"run `python start_services.py triage {name}`"
                    )
            for name, evidence in self._cpu.items():
                if evidence:
                    backend = self._backend.get(name)
                    given = f"given a GPU ({backend})" if backend else "given a GPU"
                    found[("gpu_fallback", name)] = (
                        f"{given} but runs on the CPU: {'; '.join(evidence)}; "
                        f"run `python start_services.py triage {name}`"
                    )
        return found
