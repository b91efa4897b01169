"""Wire models shared by the brain, its workers and the CLI client.

Every worker write about a task carries a ``LeaseRef`` (attempt number + lease id); the
task id is in the URL. The brain refuses a write whose triple does not match the live
lease with 409, so a worker that lost its lease can never commit a result.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core.core_schema import ValidatorFunctionWrapHandler

from airig.common.jsonsafe import check_json_value
from airig.common.ollama_names import OLLAMA_NAME_PATTERN, valid_ollama_name
from airig.common.task_types import TASK_TYPES

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
    # Handed to the external tier (airig/brain/escalation/): waits for its answer, never
    # claimable by a worker.
    ESCALATED = "ESCALATED"

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
        ESCALATED,
    )


class Wire(BaseModel):
    """A wire model: no NaN or Infinity (they are not JSON and cannot be sent back)."""

    model_config = ConfigDict(allow_inf_nan=False)


# True while an ``Inbound`` body that was checked whole is being validated: the models
# nested in it (an exchange's reports) skip the walk over what was just walked.
_CHECKED_WHOLE: ContextVar[bool] = ContextVar("airig_checked_whole", default=False)


class Inbound(Wire):
    """A request body. Strict types (``false`` is not 0.0, ``"1"`` is not 1: what the
    schema says is what is accepted). Checked whole before validation, because
    ``json.loads`` lets a lone surrogate through to the fields and it breaks only later
    (in SQLite, or when the value is sent back). Once per body: an exchange's reports are
    ``Inbound`` too, and walking each again cost as much as the first walk (issue 36)."""

    model_config = ConfigDict(allow_inf_nan=False, strict=True)

    @model_validator(mode="wrap")
    @classmethod
    def _storable(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, dict) or _CHECKED_WHOLE.get():
            return handler(data)
        check_json_value(data, bound_ints=False, checked=(BaseModel,))
        whole = _CHECKED_WHOLE.set(True)
        try:
            return handler(data)
        finally:
            _CHECKED_WHOLE.reset(whole)


def _whole(value: Any) -> Any:
    """JSON has one kind of number: ``2101.0`` is the integer 2101 to JSON Schema (what the
    OpenAPI schema's ``integer`` means) and to a client that writes it so. ``2101.5``,
    ``true`` and ``"2101"`` stay refused (strict)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# An integer of a request body (``Inbound``): what the schema's ``integer`` accepts.
WholeNumber = Annotated[int, BeforeValidator(_whole)]


# Bounds of what a worker may report about a GPU: beyond any card made (4 TiB of VRAM, a
# 5 kW board, 4096 cards) or any sensor reading (-40 to 150 °C) is a 422, not a number the
# scheduler and the dashboard go on to use.
MAX_GPU_INDEX = 4096
MAX_VRAM_MB = 4 * 1024 * 1024
MAX_GPUS = 64  # per worker; a whole machine's cards when it runs on the bare host
MAX_RESIDENT = 256  # models one worker reports loaded (Ollama loads a handful)


def _ollama_name(text: str) -> str:
    if not valid_ollama_name(text):
        raise ValueError(f"{text[:80]!r} is not an Ollama model name")
    return text


# What a worker reports resident: Ollama's own names, so anything else is refused (a
# joined rig writes them, and the planner's prompt quotes them). The schema publishes the
# parser's rules as a pattern; the parser stays the check.
ResidentModels = Annotated[
    list[
        Annotated[
            str,
            AfterValidator(_ollama_name),
            WithJsonSchema({"type": "string", "pattern": OLLAMA_NAME_PATTERN}),
        ]
    ],
    Field(max_length=MAX_RESIDENT),
]


class GpuInfo(Wire):
    model_config = ConfigDict(allow_inf_nan=False, strict=True)  # nested in requests

    index: WholeNumber = Field(ge=0, le=MAX_GPU_INDEX)
    name: str = Field(default="", max_length=256)
    vram_total_mb: WholeNumber = Field(default=0, ge=0, le=MAX_VRAM_MB)  # 0: not known
    vram_free_mb: WholeNumber = Field(default=0, ge=0, le=MAX_VRAM_MB)
    temperature_c: float | None = Field(default=None, ge=-40, le=150)
    power_w: float | None = Field(default=None, ge=0, le=5000)

    @model_validator(mode="after")
    def _free_within_total(self) -> GpuInfo:
        if self.vram_total_mb and self.vram_free_mb > self.vram_total_mb:
            raise ValueError("vram_free_mb is more than vram_total_mb")
        return self


# A rig's name (its machine's hostname unless AIRIG_RIG_NAME says otherwise): shown next to
# its workers in `status` and on the dashboard, so plain characters and a bounded length.
HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def rig_name(text: str) -> str:
    """``text`` (a hostname) made a valid rig name: other characters become '-'."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", text.strip()).lstrip("._-")[:63]
    return name or "rig"


# A worker's name is quoted in alerts, notices, the dashboard and `status`: one strict
# pattern, so a joined rig cannot put newlines, mentions or markup there.
WORKER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class RegisterRequest(Inbound):
    name: str = Field(min_length=1, max_length=128, pattern=WORKER_NAME_PATTERN)
    # Empty from a worker that predates rigs; the brain shows it as unknown.
    host: str = Field(default="", max_length=63, pattern=f"{HOST_PATTERN}|^$")
    classes: list[str] = Field(default_factory=lambda: ["cpu"])
    gpu_index: WholeNumber | None = Field(default=None, ge=0, le=MAX_GPU_INDEX)
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=MAX_GPUS)
    resident_models: ResidentModels = Field(default_factory=list)
    # The token this worker held, when it registers again (after a 401): proves it is
    # the same worker, so it may take its name back while its last heartbeat is fresh.
    previous_token: str | None = Field(default=None, max_length=256)


class RegisterResponse(Wire):
    worker_id: str
    token: str
    heartbeat_interval_s: float
    lease_s: float
    claim_wait_s: float


class HeartbeatRequest(Inbound):
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=MAX_GPUS)
    resident_models: ResidentModels = Field(default_factory=list)


class ClaimRequest(Inbound):
    wait_s: float = Field(default=20.0, ge=0, le=120)
    resident_models: ResidentModels = Field(default_factory=list)
    # Start the first task in the claim's own write (LEASED -> RUNNING): one round trip
    # less. Only for a worker that runs it at once; prefetched tasks start when they run.
    start: bool = False
    # Up to this many tasks; beyond the first only cpu / script tasks (prefetch never
    # binds GPU work early: that would defeat the residency policy).
    max_tasks: WholeNumber = Field(default=1, ge=1, le=32)
    # Chosen by the worker per claim and resent unchanged on a retry: a replayed claim
    # gets the tasks the lost answer carried instead of new ones.
    claim_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9]{8,40}$")


class LeaseRef(Inbound):
    attempt: WholeNumber = Field(ge=1)
    lease_id: str = Field(min_length=1, max_length=64)


class Assignment(Wire):
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
    # The brain's residency decision: unload ``evict``, then load ``load``, before the
    # task runs. GPU workers swap; CPU workers ignore both (nothing of theirs to evict).
    evict: list[str] = Field(default_factory=list)
    load: str | None = None
    need_vram_mb: int | None = None  # when the brain knows the model's size

    @property
    def lease(self) -> LeaseRef:
        return LeaseRef(attempt=self.attempt, lease_id=self.lease_id)

    @property
    def load_service(self) -> str | None:
        """The service that loads ``load``: the one that will run this task's model (the
        table's ``model_service``: the one that holds it in GPU memory, where a worker
        swaps models)."""
        spec = TASK_TYPES.get(self.type)
        return spec.model_service if self.load and spec is not None else None


class LeaseStatus(Wire):
    lease_expires_at: float
    state: str


# The most tokens per second a completion may report: far past any model on any card.
MAX_TOKENS_PER_S = 1_000_000.0


class CompleteRequest(LeaseRef):
    output: dict[str, Any] = Field(default_factory=dict)
    files: list[str] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    # What the brain learns per (task type, model, GPU) (issue 40), measured by the worker
    # during the attempt; optional, so an older worker's report stays valid. Out of range
    # is a 422, as a heartbeat's GPU figures are.
    peak_vram_mb: WholeNumber | None = Field(default=None, ge=0, le=MAX_VRAM_MB)
    tokens_per_s: float | None = Field(default=None, ge=0, le=MAX_TOKENS_PER_S)

    @field_validator("output", "metrics")
    @classmethod
    def _bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Stored, templated into payloads and summed into learned costs: 64-bit ints only.
        return check_json_value(value)

    @model_validator(mode="after")
    def _measured_in_metrics(self) -> CompleteRequest:
        # The brain stores and learns from ``metrics``: the checked figures go there too,
        # in place of whatever an older worker's free-form metrics said under those names.
        for name in ("peak_vram_mb", "tokens_per_s"):
            value = getattr(self, name)
            if value is not None:
                self.metrics[name] = value
        return self


class FailRequest(LeaseRef):
    error_type: str = Field(min_length=1, max_length=64)
    message: str = Field(default="", max_length=8000)
    retryable: bool = True


class ReleaseRequest(LeaseRef):
    reason: str = "worker stopping"


# One exchange (POST /v1/exchange) carries a worker's reports, applied in order in one
# transaction, and optionally its next claim: one round trip per task, or per batch.
class StartReport(LeaseRef):
    action: Literal["start"] = "start"
    task_id: WholeNumber


class RenewReport(LeaseRef):
    action: Literal["renew"] = "renew"
    task_id: WholeNumber


class CompleteReport(CompleteRequest):
    action: Literal["complete"] = "complete"
    task_id: WholeNumber


class FailReport(FailRequest):
    action: Literal["fail"] = "fail"
    task_id: WholeNumber


class ReleaseReport(ReleaseRequest):
    action: Literal["release"] = "release"
    task_id: WholeNumber


Report = Annotated[
    StartReport | RenewReport | CompleteReport | FailReport | ReleaseReport,
    Field(discriminator="action"),
]


class ExchangeRequest(Inbound):
    reports: list[Report] = Field(default_factory=list, max_length=256)
    claim: ClaimRequest | None = None


class ReportResult(Wire):
    """How one report fared: 200, 404 (no such task) or 409 (not this worker's lease)."""

    task_id: int
    action: str
    status: int
    state: str | None = None
    lease_expires_at: float | None = None
    detail: str = ""


class ExchangeResponse(Wire):
    results: list[ReportResult]
    assignments: list[Assignment]


# A token's name is a label a person reads in `token list`: no control character (a NUL
# is refused by PostgreSQL's text and cut by SQLite's; the others garble the listing).
TOKEN_NAME_PATTERN = r"^[^\x00-\x1f\x7f]*$"


class JoinTokenRequest(Inbound):
    """A join token: registers workers of another rig (what the bootstrap token does),
    nothing else."""

    scope: Literal["join"]
    name: str = Field(default="", max_length=128, pattern=TOKEN_NAME_PATTERN)
    # The rig's trust: untrusted (the default: no sensitive task, its output tainted) or
    # full (as this machine's own workers).
    trust: Literal["untrusted", "full"] | None = None


def _no_trust(value: Any) -> Any:
    if value is not None:
        raise ValueError("trust is a join token's (a rig's); leave it out for this scope")
    return value


class ScopedTokenRequest(Inbound):
    """An admin, submit or metrics token: no trust level (that is a rig's)."""

    scope: Literal["admin", "submit", "metrics"]
    name: str = Field(default="", max_length=128, pattern=TOKEN_NAME_PATTERN)
    trust: Annotated[None, BeforeValidator(_no_trust)] = Field(
        None, description="only a join token has one: leave it out (or null)"
    )


# ``POST /v1/tokens``: the scope says which, so the schema itself says that ``trust``
# goes with a join token only (a client generated from it cannot send it elsewhere).
TokenRequest = Annotated[JoinTokenRequest | ScopedTokenRequest, Field(discriminator="scope")]


class TokenCreated(Wire):
    """The new token, shown this once; the brain keeps only its hash."""

    id: str
    token: str
    scope: str
    name: str
    trust: str | None = None  # a join token's: untrusted | full


class TokenInfo(Wire):
    """A stored token as listed: never the token, never its hash."""

    id: str
    scope: str
    name: str
    created_at: float
    revoked: bool
    revoked_at: float | None = None
    trust: str | None = None  # a join token's: untrusted | full


class TokenList(Wire):
    tokens: list[TokenInfo]


class TokenRevoked(Wire):
    id: str
    scope: str
    # False when it was revoked before: revoking is idempotent.
    revoked_now: bool
    # Workers that registered with this (join) token: their tokens stop working too.
    workers_revoked: list[str]


class WhoAmI(Wire):
    """Who a bearer token is: what `join` checks before it starts anything."""

    scope: str
    name: str


class Refusal(Wire):
    """What every error body of every server of the kit carries besides ``detail``
    (``airig/common/http_errors.py`` builds it; ``airig/brain/PLANS.md``, "Error bodies")."""

    retryable: bool = Field(
        description="the same request, sent again unchanged, may succeed (after retry_after_s)"
    )
    retry_after_s: float | None = Field(
        description="how long to wait before sending it again, when the server knows"
    )


class ErrorBody(Refusal):
    """A refusal: ``{"detail": "what is wrong and how to fix it", "retryable",
    "retry_after_s"}``."""

    detail: str


class FieldError(Wire):
    """Where a request does not fit the schema, and what is wrong (never the input)."""

    type: str
    loc: list[str | int]
    msg: str


class ValidationErrorBody(Refusal):
    """A request that does not fit the schema (422): FastAPI's ``detail`` list."""

    detail: list[FieldError]


class PlanProblem(Wire):
    message: str
    errors: list[Any] = Field(default_factory=list)
    fixes: list[Any] = Field(default_factory=list)


class PlanErrorBody(Refusal):
    """A refused plan (413, 422): what is wrong with it, task by task."""

    detail: PlanProblem
