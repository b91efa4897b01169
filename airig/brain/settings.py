"""The brain's one settings object, read from the environment once per process.

A key another side reads too (the launcher, the gateway, the workers) takes its default,
bounds and help from ``airig/common/shared_settings.py`` (``shared.setting``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from airig.common import shared_settings as shared
from airig.common.errors import ConfigError
from airig.common.secrets import is_placeholder


class BrainSettings(BaseSettings):
    """Every knob of the brain. Timers are in seconds; tests shorten them through env."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    # Loopback for a plain process; compose sets 0.0.0.0 inside the container, whose port
    # is published on AIRIG_BIND_ADDRESS.
    listen_host: str = Field("127.0.0.1", alias="BRAIN_LISTEN_HOST")
    listen_port: int = Field(8080, alias="BRAIN_LISTEN_PORT")
    db_path: Path = Field(Path("/state/brain.db"), alias="BRAIN_DB")
    # PostgreSQL instead of the SQLite file (issue 38): empty = BRAIN_DB. Several brains may
    # share one database (store/pg.py says how their writes stay serial).
    database_url: str = Field("", alias="BRAIN_DATABASE_URL", repr=False)
    # On PostgreSQL: start on an empty store even though the SQLite file BRAIN_DB still
    # holds plans (store/left_behind.py; without it the brain refuses and names
    # `migrate-store`).
    start_empty: bool = Field(False, alias="AIRIG_BRAIN_START_EMPTY")
    # On PostgreSQL: the batches of workers' claims and reports committed at once, each on
    # a connection of its own (store/pg_writers.py says why one is the default).
    pg_writers: int = Field(1, alias="BRAIN_PG_WRITERS", ge=1, le=16)
    results_dir: Path = Field(Path("/results"), alias="BRAIN_RESULTS_DIR")
    # Event and training-sample logs; empty = next to the database.
    events_path: Path | None = Field(None, alias="BRAIN_EVENTS_LOG")
    training_path: Path | None = Field(None, alias="BRAIN_TRAINING_LOG")
    admin_token: str = shared.setting(shared.ADMIN_TOKEN)
    bootstrap_token: str = shared.setting(shared.BOOTSTRAP_TOKEN)

    lease_s: float = Field(30.0, alias="BRAIN_LEASE_S", gt=0)
    heartbeat_interval_s: float = Field(0.0, alias="BRAIN_HEARTBEAT_S", ge=0)
    # Long-poll length; short enough that a stopping worker is never stuck in a claim
    # longer than Docker's default 10 s stop timeout.
    claim_wait_s: float = Field(5.0, alias="BRAIN_CLAIM_WAIT_S", ge=0)
    # The longest a claim may hold its connection, whatever wait_s it asks for.
    max_claim_wait_s: float = Field(120.0, alias="BRAIN_MAX_CLAIM_WAIT_S", ge=0)
    reaper_interval_s: float = Field(2.0, alias="BRAIN_REAPER_INTERVAL_S", gt=0)
    runtime_grace_s: float = Field(30.0, alias="BRAIN_RUNTIME_GRACE_S", ge=0)
    default_timeout_s: float = Field(1800.0, alias="BRAIN_DEFAULT_TIMEOUT_S", gt=0)

    retry_initial_s: float = Field(2.0, alias="BRAIN_RETRY_INITIAL_S", ge=0)
    retry_cap_s: float = Field(300.0, alias="BRAIN_RETRY_CAP_S", ge=0)
    infra_retries: int = Field(5, alias="BRAIN_INFRA_RETRIES", ge=0)

    aging_step_s: float = Field(60.0, alias="BRAIN_AGING_STEP_S", gt=0)
    aging_cap: float = Field(5.0, alias="BRAIN_AGING_CAP", ge=0)
    # Residency-aware scheduling (airig/brain/scheduling/residency.py) and the thermal guard.
    max_wait_s: float = Field(
        900.0, validation_alias=AliasChoices("AIRIG_MAX_WAIT_S", "BRAIN_MAX_WAIT_S"), gt=0
    )
    min_resident_s: float = Field(120.0, alias="AIRIG_MIN_RESIDENT_S", ge=0)
    thermal_limit_c: float = Field(83.0, alias="AIRIG_THERMAL_LIMIT_C", gt=0)
    thermal_hysteresis_c: float = Field(5.0, alias="AIRIG_THERMAL_HYSTERESIS_C", ge=0)

    # Alerts (airig/brain/ops/alerts.py): thresholds, and where to deliver them (Apprise URLs
    # separated by spaces or commas; empty = events and metrics only).
    alert_urls: str = Field("", alias="AIRIG_ALERT_URLS")
    alert_queue_depth: int = Field(100, alias="AIRIG_ALERT_QUEUE_DEPTH", ge=0)
    # backup_old fires when the newest `backup` (or, with none, the brain's start) is
    # older than this many hours; 0: no alert (store/backups.py).
    backup_max_age_h: float = Field(0.0, alias="AIRIG_BACKUP_MAX_AGE_H", ge=0)
    alert_gpu_temp_c: float = Field(85.0, alias="AIRIG_ALERT_GPU_TEMP_C", gt=0)
    alert_failures: int = Field(5, alias="AIRIG_ALERT_FAILURES", gt=0)
    alert_failure_window_s: float = Field(600.0, alias="AIRIG_ALERT_FAILURE_WINDOW_S", gt=0)
    # Compute services the brain probes over ai-network (airig/brain/ops/probes.py), as
    # NAME=URL pairs; empty = none. AIRIG_GPU_SERVICES: the ones `up` put on a GPU, each
    # with its backend (ollama=vulkan; .airig/host.env), whose answers must not say CPU.
    probe_services: str = Field("", alias="BRAIN_PROBE_SERVICES")
    gpu_services: str = Field("", alias="AIRIG_GPU_SERVICES")
    probe_interval_s: float = Field(20.0, alias="BRAIN_PROBE_INTERVAL_S", gt=0)
    probe_down_after: int = Field(3, alias="BRAIN_PROBE_DOWN_AFTER", gt=0)

    # The brain's model plans (airig/brain/planner/): what a `plan` task may grow its plan
    # to (tasks in the plan, levels of growth), and the model that drafts when a goal or a
    # plan task names none.
    plan_max_tasks: int = shared.setting(shared.PLAN_MAX_TASKS)
    plan_max_depth: int = shared.setting(shared.PLAN_MAX_DEPTH)
    planner_model: str = shared.setting(shared.PLANNER_MODEL)
    # The planner's catalogue: the models 02-compute provisions and verifies, and the data
    # volume whose input files it lists (airig/brain/planner/catalogue.py).
    ollama_models: str = shared.setting(shared.OLLAMA_MODELS)
    whisper_models: str = shared.setting(shared.WHISPER_MODELS)
    data_dir: Path = Field(Path("/data"), alias="BRAIN_DATA_DIR")
    # The workers' pixel budget, held to the images an escalated task sends as well
    # (escalation/images.py): what the rig refuses to decode it does not send out either.
    max_image_pixels: int = shared.setting(shared.MAX_IMAGE_PIXELS)

    # The external tier (airig/brain/escalation/): off by default. The brain talks only to
    # the gateway, which alone holds the provider's key. Prices per million tokens and the
    # budgets are in one currency unit; a call whose estimate would pass a budget is not made.
    escalation: bool = shared.setting(shared.ESCALATION)  # on / off, as a bool
    gateway_url: str = Field("http://gateway:8070", alias="AIRIG_GATEWAY_URL")
    gateway_token: str = shared.setting(shared.GATEWAY_TOKEN)
    escalation_price_in: float = shared.setting(shared.ESCALATION_PRICE_IN)
    escalation_price_out: float = shared.setting(shared.ESCALATION_PRICE_OUT)
    escalation_budget_daily: float = shared.setting(shared.ESCALATION_BUDGET_DAILY)
    escalation_budget_monthly: float = shared.setting(shared.ESCALATION_BUDGET_MONTHLY)
    escalation_rate_per_min: int = shared.setting(shared.ESCALATION_RATE_PER_MIN)
    escalation_over_budget: shared.OverBudget = shared.setting(shared.ESCALATION_OVER_BUDGET)
    escalation_max_tokens: int = shared.setting(shared.ESCALATION_MAX_TOKENS)
    # The brain's model judges an on_failure task's first failure (escalation/review.py):
    # AIRIG_PLANNER_MODEL through this Ollama.
    escalation_review: bool = shared.setting(shared.ESCALATION_REVIEW)  # on / off
    review_ollama_url: str = Field(shared.OLLAMA_URL.in_container, alias="BRAIN_OLLAMA_URL")
    # The local model's context window, for "too long to run locally" (chars / 4 estimate).
    local_context_tokens: int = shared.setting(shared.LOCAL_CONTEXT_TOKENS)

    # Retention (airig/brain/store/retention.py): finished plans, their events and result files
    # are deleted this many days after their last task ended (0 = keep forever), by a pass
    # every BRAIN_RETENTION_INTERVAL_S; the event and training-sample logs rotate past
    # AIRIG_LOG_MAX_MB (0 = never), AIRIG_LOG_KEEP rotated files kept, none past retention.
    retention_days: int = shared.setting(shared.RETENTION_DAYS)
    retention_interval_s: float = Field(3600.0, alias="BRAIN_RETENTION_INTERVAL_S", gt=0)
    log_max_mb: float = Field(100.0, alias="AIRIG_LOG_MAX_MB", ge=0)
    log_keep: int = Field(5, alias="AIRIG_LOG_KEEP", ge=0)

    # A request slower than this (its long-poll wait not counted) is logged with where its
    # time went (airig.brain.timing.py); 0: never.
    slow_request_ms: float = Field(500.0, alias="BRAIN_SLOW_REQUEST_MS", ge=0)

    max_plan_bytes: int = Field(1_048_576, alias="BRAIN_MAX_PLAN_BYTES", gt=0)
    max_tasks: int = Field(5000, alias="BRAIN_MAX_TASKS", gt=0)
    max_payload_bytes: int = Field(262_144, alias="BRAIN_MAX_PAYLOAD_BYTES", gt=0)
    result_inline_bytes: int = Field(65_536, alias="BRAIN_RESULT_INLINE_BYTES", ge=0)
    max_file_bytes: int = Field(268_435_456, alias="BRAIN_MAX_FILE_BYTES", gt=0)
    # Bytes templates may add to one payload when upstream results are filled in; a task
    # over it fails when it becomes READY (airig/brain/store/results.py).
    max_rendered_bytes: int = Field(4 * 1024 * 1024, alias="BRAIN_MAX_RENDERED_BYTES", gt=0)
    # Payload bytes one claim may carry: prefetched tasks stop being added before the
    # total would pass it (the first task always goes).
    max_claim_bytes: int = Field(4 * 1024 * 1024, alias="BRAIN_MAX_CLAIM_BYTES", gt=0)
    # Payload bytes all answers being built may hold together (airig/brain/inflight.py):
    # many workers claiming at once each held a claim's worth. A task that does not fit
    # waits in READY; one over it alone still goes when nothing else is held. 4 x 4 MiB.
    max_inflight_bytes: int = Field(16 * 1024 * 1024, alias="BRAIN_MAX_INFLIGHT_BYTES", gt=0)
    # /metrics needs an admin or metrics-scoped token unless this is set: counters name
    # workers and models. Set it only when the port is reachable from trusted hosts.
    metrics_public: bool = Field(False, alias="BRAIN_METRICS_PUBLIC")
    # 02-compute's models-ready gate: the verified-model inventory the dashboard shows.
    models_url: str = Field("http://models-ready:8099/models", alias="BRAIN_MODELS_URL")

    @model_validator(mode="after")
    def _derive(self) -> BrainSettings:
        if not self.heartbeat_interval_s:
            self.heartbeat_interval_s = self.lease_s / 3
        return self

    @property
    def events_file(self) -> Path:
        return self.events_path or self.db_path.parent / "events.jsonl"

    @property
    def training_file(self) -> Path:
        return self.training_path or self.db_path.parent / "training_samples.jsonl"

    def require_secrets(self) -> None:
        """Refuse to serve with a missing or placeholder secret."""
        needed = [
            ("BRAIN_ADMIN_TOKEN", self.admin_token),
            ("WORKER_BOOTSTRAP_TOKEN", self.bootstrap_token),
        ]
        if self.escalation:  # the gateway refuses the brain without it
            needed.append(("AIRIG_GATEWAY_TOKEN", self.gateway_token))
        for env_name, value in needed:
            if is_placeholder(value):
                raise ConfigError(
                    f"{env_name} is missing or still 'change-me'",
                    "run the launcher once to generate it into .env, or set it in the env",
                )
