"""Wire models shared by the brain, its workers and the CLI client.

Every worker write about a task carries a ``LeaseRef`` (attempt number + lease id); the
task id is in the URL. The brain refuses a write whose triple does not match the live
lease with 409, so a worker that lost its lease can never commit a result.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

TASK_CLASSES = ("cpu", "script", "llm", "resource")
TRUST_LEVELS = ("trusted", "untrusted")


class TaskState:
    """The task states; terminal ones never change again."""

    PENDING = "PENDING"
    READY = "READY"
    LEASED = "LEASED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    RETRY_WAIT = "RETRY_WAIT"
    FAILED = "FAILED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    CANCELLED = "CANCELLED"

    TERMINAL = frozenset({SUCCEEDED, FAILED, UPSTREAM_FAILED, CANCELLED})
    LIVE_LEASE = frozenset({LEASED, RUNNING})
    ALL = (
        PENDING,
        READY,
        LEASED,
        RUNNING,
        SUCCEEDED,
        RETRY_WAIT,
        FAILED,
        UPSTREAM_FAILED,
        CANCELLED,
    )


class GpuInfo(BaseModel):
    index: int
    name: str = ""
    vram_total_mb: int = 0
    vram_free_mb: int = 0
    temperature_c: float | None = None
    power_w: float | None = None


class RegisterRequest(BaseModel):
    name: str = Field(min_length=1, max_length=128)
    classes: list[str] = Field(default_factory=lambda: ["cpu"])
    gpu_index: int | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    resident_models: list[str] = Field(default_factory=list)


class RegisterResponse(BaseModel):
    worker_id: str
    token: str
    heartbeat_interval_s: float
    lease_s: float
    claim_wait_s: float


class HeartbeatRequest(BaseModel):
    gpus: list[GpuInfo] = Field(default_factory=list)
    resident_models: list[str] = Field(default_factory=list)


class ClaimRequest(BaseModel):
    wait_s: float = Field(default=20.0, ge=0, le=120)
    resident_models: list[str] = Field(default_factory=list)


class LeaseRef(BaseModel):
    attempt: int = Field(ge=1)
    lease_id: str = Field(min_length=1, max_length=64)


class Assignment(BaseModel):
    """One leased attempt, as handed to a worker by a claim."""

    task_id: int
    plan_id: str
    key: str
    name: str
    type: str
    task_class: str
    payload: dict[str, Any]
    model: str | None = None
    trusted: bool = True
    sensitive: bool = False
    timeout_s: float
    attempt: int
    lease_id: str
    lease_expires_at: float

    @property
    def lease(self) -> LeaseRef:
        return LeaseRef(attempt=self.attempt, lease_id=self.lease_id)


class LeaseStatus(BaseModel):
    lease_expires_at: float
    state: str


class CompleteRequest(LeaseRef):
    output: dict[str, Any] = Field(default_factory=dict)
    files: list[str] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)


class FailRequest(LeaseRef):
    error_type: str = Field(min_length=1, max_length=64)
    message: str = Field(default="", max_length=8000)
    retryable: bool = True


class ReleaseRequest(LeaseRef):
    reason: str = "worker stopping"


class TokenRequest(BaseModel):
    scope: str = Field(pattern="^(admin|submit)$")
    name: str = Field(default="", max_length=128)
