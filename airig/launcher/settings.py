"""The launcher's one settings object: every knob it reads, declared once below.

Precedence: command-line flag > process environment > .env > the default declared here.
Each value remembers where it came from, so the launcher can say which source won (peers
leave users guessing why a GPU profile was or was not chosen). A bad value is one
ConfigError naming the key, its value and its source, with the fix.

The other keys of .env (Ollama tuning, the brain's and the workers' knobs) are not the
launcher's: compose passes them to the containers, whose own settings objects declare them
(``airig/brain/settings.py``, ``airig/worker/settings.py``, ``airig/provision/settings.py``).
A key the launcher shares with one of them (the brain's plan caps, the external tier's
prices, the tokens …) is declared once, in ``airig/common/shared_settings.py``; its knob
here (``shared_knob``) adds only the launcher's stack, problem and fix.
``tests/unit/test_settings_declared.py`` holds this declaration, ``.env.example`` and the
Settings table of docs/configuration.md to each other;
``tests/unit/test_settings_declared_once.py`` the settings modules to the shared declarations.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from airig.common import shared_settings as shared
from airig.common.errors import ConfigError
from airig.common.protocol import HOST_PATTERN
from airig.common.protocol import rig_name as plain_rig_name
from airig.common.secrets import PLACEHOLDER
from airig.launcher.envfile import read_env

PROFILES = ("cpu", "gpu-nvidia", "gpu-amd", "gpu-intel")
Profile = Literal["cpu", "gpu-nvidia", "gpu-amd", "gpu-intel"]
STACKS = ("01-infra", "02-compute", "03-agents")
# Where a value came from, as `up` and `detect` say it.
Source = Literal["flag", "environment", ".env", "default"]
# Compose project names allow lowercase letters, digits, '-' and '_'; volume names follow.
PREFIX_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
# Host port variable -> (stack, service it publishes), for preflight and the summary.
PORTS: dict[str, tuple[str, str]] = {
    "FILES_PORT": ("01-infra", "files"),
    "OLLAMA_PORT": ("02-compute", "ollama"),
    "COMFYUI_PORT": ("02-compute", "comfyui"),
    "WHISPER_PORT": ("02-compute", "whisper"),
    "BRAIN_PORT": ("03-agents", "brain"),
}
# What a value that does not parse is, whatever the knob.
PARSE_PROBLEM = {"int_parsing": "is not a whole number", "int_from_float": "is not a whole number"}


# What knob() keeps for the launcher (json_schema_extra), besides the stack.
KNOB_EXTRAS = ("problem", "fix", "empty_is_default", "in_env_example", "secret")
PORT = {"ge": 1, "le": 65535, "problem": "is not a TCP port", "fix": "set {key} to 1-65535 in .env"}
PICKED = "empty = the newest fitting variant of 02-compute/images.yaml"
Backend = Literal["auto", "cuda", "rocm", "vulkan", "cpu"]
BACKEND_HELP = (
    "{service}'s backend: auto (picked to fit), cuda, rocm, vulkan or cpu; one the host "
    "cannot serve stops `up`."
)
BACKEND_FIX = "set {key} to auto, cuda, rocm, vulkan or cpu"
BRAIN_ADDRESS = "`http://<AIRIG_BIND_ADDRESS>:<BRAIN_PORT>`"


def knob(default: Any, key: str, stack: str, help: str, **field: Any) -> Any:
    """One knob: pydantic's Field named ``key`` (its alias) with ``help`` as description.

    ``stack`` is its .env.example section and table group. Optional: ``problem`` (what a
    refused value is) and ``fix`` (how to mend it; {key} is replaced), ``empty_is_default``
    (as compose's ${KEY:-default}), ``in_env_example`` (False: environment only),
    ``secret`` (its value may hold a credential: never in a repr, nor in `doctor`'s bug
    report, which shows only the values of knobs not so marked); the rest goes to Field
    (constraints)."""
    extra = {name: field.pop(name) for name in KNOB_EXTRAS if name in field}
    if extra.get("secret"):
        field["repr"] = False
    return Field(
        default, alias=key, description=help, json_schema_extra={"stack": stack, **extra}, **field
    )


def shared_knob(declared: shared.Shared[Any], stack: str, **extra: Any) -> Any:
    """A knob another side reads too (``airig/common/shared_settings.py``): its key,
    default, bounds, help and secrecy from there; ``extra`` as ``knob``'s (stack, problem,
    fix …). The default is validated, so a list knob turns "" into ()."""
    if declared.secret:
        extra["secret"] = True
    return knob(
        declared.default, declared.key, stack, declared.help,
        validate_default=True, **declared.bounds, **extra,
    )  # fmt: skip


class Settings(BaseSettings):
    """Every knob the launcher reads, in .env.example's order, with its default and help.

    Built by ``load_settings`` (which records each value's source); ``Settings()`` reads
    the process environment alone, like the brain's and the workers' settings."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True)

    # ------------------------------------------------------------ general
    profile: Profile | None = knob(
        None, "AIRIG_PROFILE", "general",
        "Hardware profile: empty = detect (NVIDIA > AMD > Intel > CPU); or cpu | gpu-nvidia | "
        "gpu-amd | gpu-intel. The --profile flag wins.",
        problem="is an unknown profile",
        fix=f"use one of: {', '.join(PROFILES)}, or leave AIRIG_PROFILE empty to detect",
    )  # fmt: skip
    igpu: Literal["on", "off"] = knob(
        "off", "AIRIG_IGPU", "general",
        "on = integrated GPUs (AMD APU, Intel iGPU) do work too; their memory is the host's, "
        "so off by default.",
        problem="is not on or off", fix="set {key} to on or off",
    )  # fmt: skip
    gpu_probe_timeout: float = knob(
        120.0, "AIRIG_GPU_PROBE_TIMEOUT", "general",
        "Seconds the GPU probe container may take to start (several per card without "
        "persistence mode); empty = the default.",
        gt=0, le=86400, empty_is_default=True, problem="is not a positive number of seconds",
        fix="set {key} in .env (default 120)",
    )  # fmt: skip
    proof: Literal["on", "off"] = knob(
        "on", "AIRIG_PROOF", "general",
        "on = `up` runs each GPU image on the GPU before relying on it (a failure moves the "
        "service to the next image that fits); off = trust 02-compute/images.yaml unproved.",
        problem="is not on or off", fix="set {key} to on or off",
    )  # fmt: skip
    proof_timeout: float = knob(
        180.0, "AIRIG_PROOF_TIMEOUT", "general",
        "Seconds one image's GPU proof may take (first CUDA init, PyTorch import); empty = "
        "the default.",
        gt=0, le=3600, empty_is_default=True, problem="is not a positive number of seconds",
        fix="set {key} in .env (default 180)",
    )  # fmt: skip
    bind_address: str = knob(
        "127.0.0.1", "AIRIG_BIND_ADDRESS", "general",
        "Address every host port binds to; 0.0.0.0 exposes the APIs to your LAN.",
    )  # fmt: skip
    project_prefix: str = knob(
        "airig", "AIRIG_PROJECT_PREFIX", "general",
        "Prefix of this kit's compose projects and volumes (a second kit copy on one Docker "
        "engine).",
        pattern=PREFIX_PATTERN.pattern, problem="cannot name compose projects",
        fix="use lowercase letters, digits, '-' or '_' (e.g. airig2), at most 40",
    )  # fmt: skip
    configured_rig_name: str = knob(
        "", "AIRIG_RIG_NAME", "general",
        "This rig's name at the brain; empty = this machine's hostname.",
        pattern=f"{HOST_PATTERN}|^$", problem="is not a plain name",
        fix="use letters, digits, '.', '-' or '_' (at most 63), or leave it empty",
    )  # fmt: skip
    min_free_disk_gb: int = knob(
        20, "AIRIG_MIN_FREE_DISK_GB", "general",
        "Refuse to start with less free disk (GB) under Docker's data root.",
    )  # fmt: skip
    wait_timeout: int = knob(
        1800, "AIRIG_WAIT_TIMEOUT", "general",
        "Seconds `up --wait` may take per stack (first boots download models).",
    )  # fmt: skip

    # ------------------------------------------------------------ 01-infra
    network: str = knob(
        "ai-network", "AIRIG_NETWORK", "01-infra",
        "The shared network every stack joins (created by the launcher).",
    )  # fmt: skip
    files_port: int = knob(8090, "FILES_PORT", "01-infra", "Host port of the file service.", **PORT)
    # The brain's store (docs/upgrades-and-backups.md, "The store on PostgreSQL"): postgres
    # starts 01-infra's `postgres` profile and gives the brain BRAIN_DATABASE_URL.
    brain_store: Literal["sqlite", "postgres"] = knob(
        "sqlite", "AIRIG_BRAIN_STORE", "01-infra",
        "Where the brain keeps its store: sqlite (a file on its volume) or postgres (01-infra's "
        "postgres service; for a fleet past a few hundred workers).",
        empty_is_default=True, problem="is not a store the brain runs on",
        fix="set {key} to sqlite or postgres",
    )  # fmt: skip
    postgres_image: str = knob(
        "postgres:17", "POSTGRES_IMAGE", "01-infra",
        "The postgres service's image (upstream's; a mirror's path to it works too).",
        empty_is_default=True,
    )  # fmt: skip
    # change-me as .env.example ships it; `up` replaces it (or an empty one) once
    postgres_password: str = knob(
        PLACEHOLDER, "POSTGRES_PASSWORD", "01-infra",
        "The brain's database password (AIRIG_BRAIN_STORE=postgres); change-me or empty = "
        "generated by `up`.",
        secret=True,
    )  # fmt: skip

    # ------------------------------------------------------------ 02-compute
    ollama_image: str = knob(
        "", "OLLAMA_IMAGE", "02-compute", f"Ollama's image for CPU and NVIDIA; {PICKED}."
    )
    ollama_image_rocm: str = knob(
        "", "OLLAMA_IMAGE_ROCM", "02-compute", f"Ollama's image for AMD (-rocm); {PICKED}."
    )
    ollama_image_vulkan: str = knob(
        "", "OLLAMA_IMAGE_VULKAN", "02-compute",
        f"Ollama's Vulkan image (AMD cards ROCm dropped), built by the kit; {PICKED}.",
    )  # fmt: skip
    ollama_backend: Backend = knob(
        "auto", "OLLAMA_BACKEND", "02-compute", BACKEND_HELP.format(service="Ollama"),
        problem="is not a backend", fix=BACKEND_FIX,
    )  # fmt: skip
    comfyui_backend: Backend = knob(
        "auto", "COMFYUI_BACKEND", "02-compute", BACKEND_HELP.format(service="ComfyUI"),
        problem="is not a backend", fix=BACKEND_FIX,
    )  # fmt: skip
    whisper_backend: Backend = knob(
        "auto", "WHISPER_BACKEND", "02-compute", BACKEND_HELP.format(service="Whisper"),
        problem="is not a backend", fix=BACKEND_FIX,
    )  # fmt: skip
    comfyui_image_cpu: str = knob(
        "", "COMFYUI_IMAGE_CPU", "02-compute", f"ComfyUI's CPU image; {PICKED}."
    )
    comfyui_image_nvidia: str = knob(
        "", "COMFYUI_IMAGE_NVIDIA", "02-compute", f"ComfyUI's NVIDIA image; {PICKED}."
    )
    comfyui_image_amd: str = knob(
        "", "COMFYUI_IMAGE_AMD", "02-compute", f"ComfyUI's AMD image; {PICKED}."
    )
    comfyui_image_intel: str = knob(
        "", "COMFYUI_IMAGE_INTEL", "02-compute", f"ComfyUI's Intel image (xpu); {PICKED}."
    )
    comfyui_cli_args: str = knob(
        "", "COMFYUI_CLI_ARGS", "02-compute",
        "Extra ComfyUI flags; VRAM flags (--lowvram …) only on a GPU.",
    )  # fmt: skip
    whisper_image_cpu: str = knob(
        "", "WHISPER_IMAGE_CPU", "02-compute", f"Whisper's (speaches) CPU image; {PICKED}."
    )
    whisper_image_cuda: str = knob(
        "", "WHISPER_IMAGE_CUDA", "02-compute", f"Whisper's (speaches) CUDA image; {PICKED}."
    )
    image_registry: str = knob(
        "", "AIRIG_IMAGE_REGISTRY", "02-compute",
        "Registry the compute images are pulled from, under their upstream paths (a mirror "
        "or pull-through cache, e.g. 127.0.0.1:5000); empty = each image's own registry.",
        pattern=r"^$|^[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[a-z0-9._-]+)*/?$",
        problem="is not a registry address",
        fix="set {key} to host[:port][/path] (no http://), e.g. 127.0.0.1:5000, or empty it",
    )  # fmt: skip
    ollama_port: int = knob(11434, "OLLAMA_PORT", "02-compute", "Host port of Ollama.", **PORT)
    comfyui_port: int = knob(8188, "COMFYUI_PORT", "02-compute", "Host port of ComfyUI.", **PORT)
    whisper_port: int = knob(8000, "WHISPER_PORT", "02-compute", "Host port of Whisper.", **PORT)
    hsa_override_gfx_version: str = knob(
        "", "HSA_OVERRIDE_GFX_VERSION", "02-compute",
        "AMD: the gfx version ROCm treats the cards as (e.g. 10.3.0 for RDNA2); empty = none.",
    )  # fmt: skip
    ollama_models: Annotated[tuple[str, ...], NoDecode] = shared_knob(
        shared.OLLAMA_MODELS, "02-compute"
    )
    whisper_models: Annotated[tuple[str, ...], NoDecode] = shared_knob(
        shared.WHISPER_MODELS, "02-compute"
    )
    recipes: Annotated[tuple[str, ...], NoDecode] = knob(
        (), "AIRIG_RECIPES", "02-compute",
        "Recipes (recipes/NAME.yaml) whose models `up` pulls besides the two lists above, "
        "e.g. video-notes,photos-captions; `up --recipe NAME` adds one.",
        problem="is not a list of recipe names", fix="write it like pdf-text,video-notes",
    )  # fmt: skip

    # ------------------------------------------------------------ 03-agents
    image: str = knob(
        "airig/airig:0.1.0", "AIRIG_IMAGE", "03-agents",
        "The image the kit builds for its brain, workers and init containers.",
    )  # fmt: skip
    base_image: str = knob(
        "python:3.12-slim", "AIRIG_BASE_IMAGE", "03-agents",
        "Base image of that build (also the GPU probe's); empty = the default.",
        empty_is_default=True,
    )  # fmt: skip
    pip_install_args: str = knob(
        "", "AIRIG_PIP_INSTALL_ARGS", "03-agents",
        "Extra pip arguments for that build (e.g. an index URL).",
        secret=True,  # an index URL may carry a token, in its user part or its path
    )  # fmt: skip
    # The NVIDIA workers' own image (issue 39 §2): the kit's image with onnxruntime-gpu and
    # NVIDIA's CUDA 12 / cuDNN 9 wheels in place of the CPU onnxruntime, so the ocr task's
    # onnx engine reads on the card. Gigabytes more to build and keep: off keeps one image.
    ocr_cuda: Literal["on", "off"] = knob(
        "on", "AIRIG_OCR_CUDA", "03-agents",
        "on = NVIDIA GPU workers run AIRIG_IMAGE-cuda (the same build with onnxruntime-gpu "
        "and CUDA 12 / cuDNN 9 wheels: OCR on the card, gigabytes larger); off = every "
        "worker runs AIRIG_IMAGE (OCR on the CPU).",
        problem="is not on or off", fix="set {key} to on or off",
    )  # fmt: skip
    brain_port: int = knob(8080, "BRAIN_PORT", "03-agents", "Host port of the brain's API.", **PORT)
    # More than one brain process (compose's `brains` profile: brain-2 beside brain, behind
    # the same name on ai-network): a brain killed mid-plan costs the fleet nothing. Two
    # processes can share one store only on a server: PostgreSQL's row and advisory locks.
    brains: int = knob(
        1, "AIRIG_BRAINS", "03-agents",
        "Brain processes serving the fleet: 1, or 2 (needs AIRIG_BRAIN_STORE=postgres).",
        ge=1, le=2, empty_is_default=True, problem="is not 1 or 2", fix="set {key} to 1 or 2",
    )  # fmt: skip
    cpu_workers: int = knob(
        2, "AIRIG_CPU_WORKERS", "03-agents", "Number of CPU-only workers.",
        ge=0, problem="is negative", fix="set it to 0 or more in .env",
    )  # fmt: skip
    brain_gpus: Annotated[tuple[int, ...], NoDecode] = knob(
        (), "AIRIG_BRAIN_GPUS", "03-agents",
        "GPUs given together to one worker for a larger model, e.g. 0,3; empty = one worker "
        "per GPU.",
        problem="is not a list of GPU indexes", fix="write it like 0,3 (see `detect`)",
    )  # fmt: skip
    # Retention (airig/brain/store/retention.py); `plans --prune` without --older-than uses it.
    retention_days: int = shared_knob(
        shared.RETENTION_DAYS, "03-agents",
        problem="is not a whole number of days >= 0", fix="set {key} to 0 or more in .env",
    )  # fmt: skip
    # The brain's model plans (airig/brain/planner/): `submit --goal`, `plan` tasks.
    planner_model: str = shared_knob(shared.PLANNER_MODEL, "03-agents", empty_is_default=True)
    # What the recipes (recipes/) run on, besides AIRIG_PLANNER_MODEL and the first of
    # AIRIG_WHISPER_MODELS: `submit` fills a recipe's {{ models.vision }} and
    # {{ models.embed }} with these, and refuses one not in AIRIG_OLLAMA_MODELS.
    vision_model: str = knob(
        "qwen2.5vl:7b", "AIRIG_VISION_MODEL", "03-agents",
        "The recipes' vision model (keyframes, photos, OCR on GPU); add it to "
        "AIRIG_OLLAMA_MODELS to run them.",
        empty_is_default=True,
    )  # fmt: skip
    embed_model: str = knob(
        "nomic-embed-text", "AIRIG_EMBED_MODEL", "03-agents",
        "The recipes' embedding model: what their search index is built and queried with.",
        empty_is_default=True,
    )  # fmt: skip
    plan_max_tasks: int = shared_knob(
        shared.PLAN_MAX_TASKS, "03-agents",
        problem="is not a whole number >= 1", fix="set {key} to 1 or more in .env",
    )  # fmt: skip
    plan_max_depth: int = shared_knob(
        shared.PLAN_MAX_DEPTH, "03-agents",
        problem="is not a whole number >= 0", fix="set {key} to 0 or more in .env",
    )  # fmt: skip
    brain_admin_token: str = shared_knob(shared.ADMIN_TOKEN, "03-agents")
    worker_bootstrap_token: str = shared_knob(shared.BOOTSTRAP_TOKEN, "03-agents")
    brain_public_url: str = knob(
        "", "AIRIG_BRAIN_PUBLIC_URL", "03-agents",
        f"The URL other rigs join (`token create --join`); empty = {BRAIN_ADDRESS}.",
    )  # fmt: skip
    join_brain_url: str = knob(
        "", "AIRIG_JOIN_BRAIN_URL", "03-agents",
        "Written by `join`: the brain this rig's workers use; empty = its own.",
    )  # fmt: skip
    join_token: str = knob(
        "", "AIRIG_JOIN_TOKEN", "03-agents",
        "Written by `join`: this rig's join token (a secret).", secret=True,
    )  # fmt: skip
    # The external tier's gateway (airig/gateway/): the `escalation` profile
    # starts it; it alone holds the provider's key, read from a file.
    escalation: shared.OnOff = shared_knob(
        shared.ESCALATION, "03-agents",
        problem="is neither on nor off", fix="set {key}=on or {key}=off in .env",
    )  # fmt: skip
    gateway_provider: shared.Provider = shared_knob(
        shared.GATEWAY_PROVIDER, "03-agents",
        problem="is not a provider the gateway speaks", fix="set {key}=openai or anthropic",
    )  # fmt: skip
    gateway_model: str = shared_knob(shared.GATEWAY_MODEL, "03-agents")
    gateway_base_url: str = shared_knob(shared.GATEWAY_BASE_URL, "03-agents")
    gateway_key_file: str = shared_knob(shared.GATEWAY_KEY_FILE, "03-agents")
    gateway_token: str = shared_knob(shared.GATEWAY_TOKEN, "03-agents")
    # The external tier, the brain's side (airig/brain/escalation/): what a call
    # may cost and when a task goes. The brain reads them; `up` refuses a bad value.
    escalation_price_in: float = shared_knob(
        shared.ESCALATION_PRICE_IN, "03-agents",
        problem="is not a price >= 0", fix="set {key} to a number >= 0 in .env",
    )  # fmt: skip
    escalation_price_out: float = shared_knob(
        shared.ESCALATION_PRICE_OUT, "03-agents",
        problem="is not a price >= 0", fix="set {key} to a number >= 0 in .env",
    )  # fmt: skip
    escalation_budget_daily: float = shared_knob(
        shared.ESCALATION_BUDGET_DAILY, "03-agents",
        problem="is not an amount >= 0", fix="set {key} to a number >= 0 in .env",
    )  # fmt: skip
    escalation_budget_monthly: float = shared_knob(
        shared.ESCALATION_BUDGET_MONTHLY, "03-agents",
        problem="is not an amount >= 0", fix="set {key} to a number >= 0 in .env",
    )  # fmt: skip
    escalation_rate_per_min: int = shared_knob(
        shared.ESCALATION_RATE_PER_MIN, "03-agents",
        problem="is not a whole number >= 1", fix="set {key} to 1 or more in .env",
    )  # fmt: skip
    escalation_over_budget: shared.OverBudget = shared_knob(
        shared.ESCALATION_OVER_BUDGET, "03-agents",
        problem="is neither wait nor fail", fix="set {key}=wait or {key}=fail in .env",
    )  # fmt: skip
    escalation_max_tokens: int = shared_knob(
        shared.ESCALATION_MAX_TOKENS, "03-agents",
        problem="is not a whole number >= 16", fix="set {key} to 16 or more in .env",
    )  # fmt: skip
    escalation_review: shared.OnOff = shared_knob(
        shared.ESCALATION_REVIEW, "03-agents",
        problem="is neither on nor off", fix="set {key}=on or {key}=off in .env",
    )  # fmt: skip
    local_context_tokens: int = shared_knob(
        shared.LOCAL_CONTEXT_TOKENS, "03-agents",
        problem="is not a whole number >= 256", fix="set {key} to 256 or more in .env",
    )  # fmt: skip

    # ------------------------------------------------------------ the CLI's environment
    brain_url: str = shared_knob(shared.BRAIN_URL, "cli", in_env_example=False)

    _root: Path = PrivateAttr(default_factory=Path.cwd)
    _sources: dict[str, Source] = PrivateAttr(default_factory=dict)
    # .env keys the launcher does not read, and undeclared AIRIG_* variables: the bug report
    _unread: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _empty_is_default(cls, data: Any) -> Any:
        """Knobs whose empty value means their default, as compose's ${KEY:-default}."""
        if not isinstance(data, dict):
            return data
        return {
            key: value
            for key, value in data.items()
            if value != "" or not knob_extra(key).get("empty_is_default")
        }

    @field_validator("profile", mode="before")
    @classmethod
    def _empty_profile_detects(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("ollama_models", "whisper_models", "recipes", "brain_gpus", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value

    @model_validator(mode="after")
    def _brains_share_a_server(self) -> Settings:
        # Two brains on one SQLite file would each believe it is the store's one writer.
        if self.brains > 1 and self.brain_store != "postgres" and not self.joined:
            raise ConfigError(
                f"AIRIG_BRAINS={self.brains} needs the store on a server, but "
                f"AIRIG_BRAIN_STORE is {self.brain_store}",
                "set AIRIG_BRAIN_STORE=postgres in .env (then `python start_services.py "
                "migrate-store` if this kit ran on SQLite), or AIRIG_BRAINS=1",
            )
        return self

    @model_validator(mode="after")
    def _join_pair(self) -> Settings:
        if bool(self.join_brain_url) != bool(self.join_token):
            raise ConfigError(
                "AIRIG_JOIN_BRAIN_URL and AIRIG_JOIN_TOKEN must be set together",
                "run `python start_services.py join --brain URL --token T` again, or empty "
                "both in .env to run this rig with its own brain",
            )
        return self

    # ------------------------------------------------------------ where things are
    @property
    def root(self) -> Path:
        """The kit checkout these settings belong to."""
        return self._root

    @property
    def env_file(self) -> Path:
        return self._root / ".env"

    @property
    def example_file(self) -> Path:
        return self._root / ".env.example"

    @property
    def state_dir(self) -> Path:
        """Generated files (compose overlays); ignored by git."""
        return self._root / ".airig"

    # ------------------------------------------------------------ derived values
    @property
    def rig_name(self) -> str:
        """This rig's name at the brain: AIRIG_RIG_NAME, else the machine's hostname."""
        return plain_rig_name(self.configured_rig_name or socket.gethostname())

    @property
    def joined(self) -> bool:
        """True when this rig's workers use another machine's brain (`join`)."""
        return bool(self.join_brain_url)

    def ports(self) -> dict[str, int]:
        return {key: int(self.value_of(key)) for key in PORTS}

    # ------------------------------------------------------------ by key
    def source_of(self, key: str) -> Source:
        return self._sources.get(key, "default")

    def value_of(self, key: str) -> str:
        """A declared knob's value as .env spells it, for code driven by tables of keys
        (ports, image variables). A key that is not declared is a KeyError."""
        return env_text(getattr(self, FIELD_OF[key]))

    def report_values(self) -> dict[str, str]:
        """Every value, as .env spells it, for a bug report (which shows only those of
        ``REPORTABLE`` keys)."""
        return {**self._unread, **{key: self.value_of(key) for key in FIELD_OF}}


# declared key (AIRIG_PROFILE) -> attribute (profile), in declaration order
FIELD_OF: dict[str, str] = {
    cast(str, info.alias): name for name, info in Settings.model_fields.items()
}


def knob_extra(key: str) -> dict[str, Any]:
    """The knob's stack, problem, fix and flags (see ``knob``); {} for an undeclared key."""
    if key not in FIELD_OF:
        return {}
    extra = Settings.model_fields[FIELD_OF[key]].json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


# The keys whose values a bug report (`doctor --json`) may show: the knobs declared above
# that are not marked secret. Any other key (another stack's knob, one a user added) may
# hold anything (a cookie, a key, a webhook URL with its secret in the path): redacted.
REPORTABLE = frozenset(key for key in FIELD_OF if not knob_extra(key).get("secret"))


def env_text(value: object) -> str:
    """A value as .env writes it: '' for none, comma lists, 120 rather than 120.0."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(env_text(item) for item in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def load_settings(root: Path, flags: Mapping[str, str | None] | None = None) -> Settings:
    """Merge defaults < .env < environment < flags (a flag of None or "" is not given);
    validate; remember each value's source."""
    env_path = root / ".env"
    dotenv = read_env(env_path) if env_path.is_file() else {}
    given = {key: value for key, value in (flags or {}).items() if value}
    layers: tuple[tuple[Source, Mapping[str, str]], ...] = (
        (".env", dotenv),
        ("environment", os.environ),
        ("flag", given),
    )
    raw: dict[str, str] = {}
    sources: dict[str, Source] = {}
    for source, layer in layers:
        for key in FIELD_OF:
            if key in layer:
                raw[key], sources[key] = layer[key], source
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc.errors()[0], raw, sources) from None
    settings._root, settings._sources = root, sources
    unread = {k: v for k, v in os.environ.items() if k.startswith("AIRIG_")}
    settings._unread = {k: v for k, v in {**dotenv, **unread}.items() if k not in FIELD_OF}
    return settings


def _refusal(
    error: ErrorDetails, raw: Mapping[str, str], sources: Mapping[str, Source]
) -> ConfigError:
    """One line for the first value pydantic refused: key, value, source, and the fix."""
    key = str(error["loc"][0]) if error["loc"] else ""
    extra = knob_extra(key)
    whole = len(error["loc"]) == 1  # not one item of a list (AIRIG_BRAIN_GPUS=0,x)
    problem = (whole and PARSE_PROBLEM.get(error["type"])) or extra.get("problem") or "is not valid"
    fix = (extra.get("fix") or "fix {key} in .env").format(key=key)
    value = raw.get(key, error["input"])
    shown = value if isinstance(value, str) and re.fullmatch(r"-?\d+", value) else repr(value)
    return ConfigError(f"{key}={shown} {problem} (from {sources.get(key, 'default')})", fix)


def repo_root() -> Path:
    """The kit checkout: $AIRIG_HOME, else the working directory if it is one, else ours."""
    for candidate in (
        os.environ.get("AIRIG_HOME"),
        os.getcwd(),
        Path(__file__).resolve().parents[2],
    ):
        if candidate and (Path(candidate) / "01-infra" / "compose.yaml").is_file():
            return Path(candidate).resolve()
    raise ConfigError(
        "cannot find the airig checkout", "run from the cloned folder or set AIRIG_HOME"
    )


def checkout_settings(flags: Mapping[str, str | None] | None = None) -> Settings:
    """The settings of the checkout the CLI runs in (``repo_root``): every command's."""
    return load_settings(repo_root(), flags)
