"""The worker's one settings object, read from the environment once per process."""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from airig.common import shared_settings as shared
from airig.common.errors import ConfigError
from airig.common.protocol import TASK_CLASSES, rig_name
from airig.common.secrets import is_placeholder


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    # Keys another side reads too: declared in airig/common/shared_settings.py.
    brain_url: str = shared.setting(shared.BRAIN_URL)
    bootstrap_token: str = shared.setting(shared.BOOTSTRAP_TOKEN)
    # Empty: the Compose slot of WORKER_SERVICE (worker-cpu's second replica is `cpu-2`,
    # naming.py), else the hostname. GPU workers are named by the launcher (`gpu0`).
    name: str = Field("", alias="WORKER_NAME")
    service: str = Field("", alias="WORKER_SERVICE")
    # A joined rig's workers are named "<rig>-<name>" (the launcher sets "<rig>-"), so
    # two rigs' `gpu0` or containers never claim one name at the brain.
    name_prefix: str = Field("", alias="WORKER_NAME_PREFIX")
    # The rig this worker runs on (the launcher passes AIRIG_RIG_NAME); empty = hostname.
    host: str = Field("", alias="WORKER_HOST")
    classes_csv: str = Field("cpu", alias="WORKER_CLASSES")
    gpu: str = Field("", alias="WORKER_GPU")
    ollama_url: str = shared.setting(shared.OLLAMA_URL)
    comfyui_url: str = shared.setting(shared.COMFYUI_URL)
    whisper_url: str = shared.setting(shared.WHISPER_URL)
    # 1: WHISPER_URL is this worker's own Whisper on its GPU (the launcher's `whisper-gpuN`):
    # its loaded models are resident here like Ollama's, and the worker swaps them. 0: the
    # shared `whisper`, whose memory no worker owns.
    own_whisper: bool = Field(False, alias="WORKER_OWN_WHISPER")
    data_dir: Path = Field(Path("/data"), alias="DATA_DIR")
    work_dir: Path = Field(Path("/tmp/airig-work"), alias="WORKER_WORK_DIR")
    state_file: Path = Field(Path("/tmp/airig-worker.json"), alias="WORKER_STATE_FILE")
    # Seconds the worker may finish its attempt after SIGTERM before releasing it; with
    # the release and a claim in flight this fits Docker's default 10 s stop timeout.
    stop_grace_s: float = Field(4.0, alias="WORKER_STOP_GRACE_S", ge=0)
    # Longest back-off between attempts to reach the brain.
    retry_cap_s: float = Field(10.0, alias="WORKER_RETRY_CAP_S", gt=0)
    # Tasks a cpu / script worker may hold leased ahead (1 = none); GPU workers never do.
    prefetch: int = Field(1, alias="AIRIG_WORKER_PREFETCH", ge=1, le=32)
    # The largest image an llm / ocr task sends on (airig/executors/media.py says why 20 MiB).
    max_image_bytes: int = Field(20 * 1024 * 1024, alias="AIRIG_MAX_IMAGE_BYTES", ge=1)
    # The most pixels an image (or a PDF page at its dpi) may declare before anything
    # decodes it: a decompression bomb is refused by its header (executors/media.py).
    max_image_pixels: int = shared.setting(shared.MAX_IMAGE_PIXELS)

    @model_validator(mode="after")
    def _rig(self) -> WorkerSettings:
        if not self.name:
            from airig.worker.naming import slot_name

            self.name = (self.service and slot_name(self.service)) or socket.gethostname()
        if self.name_prefix and not self.name.startswith(self.name_prefix):
            self.name = f"{self.name_prefix}{self.name}"
        self.host = rig_name(self.host or socket.gethostname())
        return self

    @field_validator("classes_csv")
    @classmethod
    def _known_classes(cls, value: str) -> str:
        unknown = [c for c in _split(value) if c not in TASK_CLASSES]
        if unknown or not _split(value):
            raise ValueError(f"WORKER_CLASSES: use some of {', '.join(TASK_CLASSES)}")
        return value

    @property
    def classes(self) -> list[str]:
        return _split(self.classes_csv)

    @property
    def gpu_indexes(self) -> list[int]:
        """Host indexes of the GPUs this worker owns: "3" -> [3], the brain group "0,3"."""
        return [int(part) for part in _split(self.gpu) if part.isdigit()]

    @property
    def gpu_index(self) -> int | None:
        """The worker's (first) GPU; None for a CPU worker."""
        return self.gpu_indexes[0] if self.gpu_indexes else None

    def require_secrets(self) -> None:
        if is_placeholder(self.bootstrap_token):
            raise ConfigError(
                "WORKER_BOOTSTRAP_TOKEN is missing or still 'change-me'",
                "run the launcher once to generate it into .env",
            )


def _split(csv: str) -> list[str]:
    return [part.strip() for part in csv.split(",") if part.strip()]
