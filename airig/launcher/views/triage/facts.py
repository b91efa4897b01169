"""What triage gathers (facts) and what it concludes (findings): plain data, no I/O.

Collectors (``collect.py``) fill ``Facts``; the pure classifiers (``classify.py``) turn
them into ``Finding``s; ``render.py`` prints them or gives them as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from airig.launcher.compose.container import ContainerState

# The SKILL's classes (compute runbook §3), plus the kit's own.
STARTUP_CRASH = "startup crash"
FLAPPING = "flapping"
MEMORY = "memory pressure / OOM"
GPU_FALLBACK = "wrong GPU/CPU fallback"
MODEL_SYNC = "model sync / file visibility"
AGENTS = "agents"
UNREACHABLE = "cannot look"  # Docker or the brain does not answer: triage cannot see
STOPPED = "stopped"  # `docker stop` (or `down` of one service): not a crash
SERVICE_DOWN = "service down"  # the brain's probes get no answer, and nothing here says why


@dataclass(frozen=True)
class Healthcheck:
    """A container's healthcheck, in seconds (the engine keeps nanoseconds)."""

    interval_s: float
    timeout_s: float
    retries: int
    start_period_s: float

    @property
    def budget_s(self) -> float:
        """How long the engine waits before it calls the service unhealthy."""
        return self.start_period_s + self.interval_s * self.retries


@dataclass(frozen=True)
class DeviceRequest:
    """One of the engine's HostConfig.DeviceRequests: Compose's GPU reservation (driver
    nvidia, count all or device_ids) or a CDI device (driver cdi, ids nvidia.com/gpu=0)."""

    driver: str = ""  # "" is Docker's default for --gpus: the NVIDIA toolkit
    ids: tuple[str, ...] = ()
    count: int = 0  # -1: every GPU

    def __str__(self) -> str:
        if self.ids:
            which = f"GPU {','.join(self.ids)}"
        else:
            which = f"{self.count} GPUs" if self.count > 0 else "all GPUs"
        return f"device request {self.driver or 'gpu'} {which}"


@dataclass(frozen=True)
class ContainerFacts:
    stack: str
    service: str
    name: str
    status: str  # running | restarting | exited | created …
    health: str = ""  # healthy | unhealthy | starting | ""
    exit_code: int | None = None
    restart_count: int = 0
    oom_killed: bool = False
    gpu_requested: bool = False  # a device request, /dev/kfd or a /dev/dri node
    image: str = ""  # Config.Image: the reference it was created from
    devices: tuple[str, ...] = ()  # HostConfig.Devices as host:container:permissions
    device_requests: tuple[DeviceRequest, ...] = ()
    hostname: str = ""
    env: dict[str, str] = field(default_factory=dict)
    published: dict[str, str] = field(default_factory=dict)  # "11434/tcp" → host URL
    healthcheck: Healthcheck | None = None
    starts: tuple[float, ...] = ()  # epoch seconds of each `start` event in the window
    stops: tuple[float, ...] = ()  # … and of each `stop` event (a user's or Compose's stop)
    # (epoch seconds, exit code) of each `die` event: how long each run lasted, which
    # tells a crash loop (dies at once) from a service that flaps (up most of the period)
    dies: tuple[tuple[float, int], ...] = ()
    restart_policy: str = ""  # HostConfig.RestartPolicy.Name: unless-stopped, always, no …
    log_tail: tuple[str, ...] = ()
    health_log: tuple[str, ...] = ()  # the last healthcheck outputs

    @property
    def state(self) -> ContainerState:
        """The container as every other verb sees it (``compose/container.py``)."""
        return ContainerState(
            self.service, self.name, self.status, self.health, self.exit_code,
            restarts=self.restart_count,
        )  # fmt: skip


@dataclass(frozen=True)
class Facts:
    containers: tuple[ContainerFacts, ...] = ()
    # per container name: Ollama's /api/ps models, ComfyUI's /system_stats devices
    ollama_ps: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    comfyui_devices: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    workers: tuple[dict[str, Any], ...] | None = None  # the brain's list; None: no answer
    expected_workers: dict[str, int] = field(default_factory=dict)  # service → replicas
    bad_models: tuple[dict[str, Any], ...] | None = None  # `models verify` rows that failed
    unreachable: tuple[tuple[str, str], ...] = ()  # (what, why) a collector could not read
    # the brain's alerts that hold now (GET /v1/alerts: kind, subject, fired_at, message);
    # None: not read (no brain here, or it did not answer: then an `unreachable` entry)
    alerts: tuple[dict[str, Any], ...] | None = None
    vram_full_fraction: float = 0.95
    # services the last `up` moved off an image because its GPU proof failed
    # (.airig/proofs.json ``outcome``): service → from, to, on_gpu, said, fix, line
    proof_moves: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    cls: str
    service: str
    summary: str
    evidence: tuple[str, ...]
    action: str  # file or knob, the change, and why
    check: str  # how to see it worked
    rollback: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["class"] = data.pop("cls")
        data["evidence"] = list(self.evidence)
        return data
