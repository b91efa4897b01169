"""The Hugging Face hub as the speaches stand-in sees it: a catalogue of remote models and
the local hub cache (models--org--name/{blobs,snapshots/<rev>,refs/main}).

Upstream (speaches v0.8.3, the tag .env.example pins):
  - routers/models.py download_remote_model: an id that no registry's list_remote_models()
    has is 404 "Model '<id>' not found"; executors/whisper/utils.py list_remote_models asks
    the hub for library "ctranslate2" + tag "automatic-speech-recognition". The stand-in's
    hub is DEFAULT_CATALOGUE plus STANDIN_REGISTRY_MODELS (comma list); STANDIN_UNKNOWN_MODELS
    removes ids.
  - model_registry.py download_model_files_if_not_exist: True when it downloaded (200),
    False when the files were there (201).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

TASK = "automatic-speech-recognition"
# The files faster-whisper needs plus the model card speaches filters on.
MODEL_CARD = "---\nlibrary_name: ctranslate2\nlanguage:\n- en\ntags:\n- audio\n- {task}\n---\n"
# CTranslate2 Whisper conversions on the hub; .env.example's AIRIG_WHISPER_MODELS default
# (Systran/faster-whisper-small) and every id the tests download are among them.
DEFAULT_CATALOGUE = (
    *(
        f"Systran/faster-whisper-{size}"
        for size in (
            "tiny",
            "tiny.en",
            "base",
            "base.en",
            "small",
            "small.en",
            "medium",
            "medium.en",
            "large-v1",
            "large-v2",
            "large-v3",
        )
    ),
    "Systran/faster-distil-whisper-small.en",
    "Systran/faster-distil-whisper-medium.en",
    "Systran/faster-distil-whisper-large-v2",
    "Systran/faster-distil-whisper-large-v3",
    "deepdml/faster-whisper-large-v3-turbo-ct2",
)


def env_list(name: str) -> set[str]:
    return {item.strip() for item in os.environ.get(name, "").split(",") if item.strip()}


def in_registry(model_id: str) -> bool:
    if model_id in env_list("STANDIN_UNKNOWN_MODELS"):
        return False
    return model_id in DEFAULT_CATALOGUE or model_id in env_list("STANDIN_REGISTRY_MODELS")


def model_files(model_id: str) -> dict[str, bytes]:
    """Deterministic repository contents for `model_id`."""
    size = int(os.environ.get("STANDIN_MODEL_BYTES", str(1024 * 1024)))
    return {
        "README.md": MODEL_CARD.format(task=TASK).encode(),
        "config.json": json.dumps({"model_id": model_id, "num_mel_bins": 80}).encode(),
        "preprocessor_config.json": json.dumps({"feature_size": 80}).encode(),
        "tokenizer.json": json.dumps({"version": "1.0", "model": model_id}).encode(),
        "vocabulary.txt": b"\n".join(f"token{i}".encode() for i in range(64)),
        "model.bin": hashlib.shake_256(f"{model_id}:model.bin".encode()).digest(size),
    }


class HubCache:
    def __init__(self, root: Path):
        self.root = root

    def repo_dir(self, model_id: str) -> Path:
        return self.root / ("models--" + model_id.replace("/", "--"))

    def snapshot(self, model_id: str) -> Path | None:
        """The complete snapshot of a model, or None."""
        repo = self.repo_dir(model_id)
        try:
            revision = (repo / "refs" / "main").read_text().strip()
        except OSError:
            return None
        snap = repo / "snapshots" / revision
        complete = all((snap / name).is_file() for name in model_files(model_id))
        return snap if complete else None

    def download(self, model_id: str) -> bool:
        """Write the repository; False when it was already complete (speaches' 201)."""
        if self.snapshot(model_id) is not None:
            return False
        repo = self.repo_dir(model_id)
        revision = hashlib.sha1(model_id.encode()).hexdigest()
        snap = repo / "snapshots" / revision
        (repo / "blobs").mkdir(parents=True, exist_ok=True)
        snap.mkdir(parents=True, exist_ok=True)
        for name, data in model_files(model_id).items():
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            incomplete = blob.with_name(blob.name + ".incomplete")  # as huggingface_hub
            incomplete.write_bytes(data)
            os.replace(incomplete, blob)
            link = snap / name
            link.unlink(missing_ok=True)
            link.symlink_to(Path("..", "..", "blobs", blob.name))
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
        return True

    def local_models(self) -> list[dict]:
        models = []
        for repo in sorted(self.root.glob("models--*--*")):
            model_id = repo.name[len("models--") :].replace("--", "/", 1)
            snap = self.snapshot(model_id)
            if snap is None or "ctranslate2" not in (snap / "README.md").read_text():
                continue
            models.append(
                {
                    "id": model_id,
                    "created": int(repo.stat().st_mtime),
                    "object": "model",
                    "owned_by": model_id.split("/")[0],
                    "language": ["en"],
                    "task": TASK,
                }
            )
        return models
