"""Whisper (speaches): provision through its model API, then check the HF cache on disk.

speaches downloads with huggingface_hub into the standard cache layout:
``models--<org>--<name>/snapshots/<revision>/<file>`` symlinked to ``../../blobs/<id>``,
where ``<id>`` is the file's sha256 for LFS files (the model weights) and its git sha1
for small files. We hash-check the former and type/size-check the latter.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from urllib.parse import quote

import requests

from airig.common.errors import ConfigError, ProvisionError
from airig.provision.common import (
    GrowthWatcher,
    Listing,
    ModelReport,
    ServerProvisioner,
    ensure_model,
    merge_listing,
    remove_corrupt,
    tree_size,
)
from airig.provision.events import Emitter
from airig.provision.http import API_TIMEOUT, STREAM_TIMEOUT, error_text
from airig.provision.verify import ExpectedFile, FileCheckError, Verifier

_SHA256_NAME = re.compile(r"[0-9a-f]{64}")
_REPO_ID = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def repo_dir(hub_dir: Path, model: str) -> Path:
    """The HF cache folder of a repo id (huggingface_hub's ``repo_folder_name``)."""
    if not _REPO_ID.fullmatch(model):
        raise ConfigError(
            f"invalid Whisper model id {model!r}", "use org/name, e.g. Systran/faster-whisper-small"
        )
    return hub_dir / ("models--" + model.replace("/", "--"))


def snapshot_dir(repo: Path) -> Path | None:
    """The snapshot ``refs/main`` points at, else the only/newest snapshot, else None."""
    ref = repo / "refs" / "main"
    if ref.is_file():
        candidate = repo / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if candidate.is_dir():
            return candidate
    snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snapshots[-1] if snapshots else None


def expected_files(repo: Path, model: str) -> list[ExpectedFile]:
    snapshot = snapshot_dir(repo)
    if snapshot is None:
        raise ProvisionError(f"whisper model {model!r}: no snapshot under {repo}")
    files = []
    for directory, _, names in os.walk(snapshot):
        for name in sorted(names):
            path = Path(directory, name)
            blob = path.resolve().name if path.is_symlink() else ""
            digest = blob if _SHA256_NAME.fullmatch(blob) else None
            files.append(ExpectedFile(path, None, digest))
    if not files:
        raise ProvisionError(f"whisper model {model!r}: snapshot {snapshot} is empty")
    return files


class WhisperProvisioner(ServerProvisioner):
    health_path = "/health"
    service = "whisper"

    def __init__(
        self,
        url: str,
        hub_dir: Path,
        models: list[str],
        verifier: Verifier,
        emitter: Emitter,
        session: requests.Session | None = None,
    ) -> None:
        super().__init__(url, models, verifier, emitter, session)
        self.hub_dir = hub_dir

    def _model_url(self, model: str) -> str:
        return f"{self.url}/v1/models/{quote(model, safe='/')}"

    def ensure(self, model: str, force: bool = False) -> ModelReport:
        return ensure_model(model, force, self.verify, self.download, self._repair)

    def download(self, model: str) -> None:
        repo = repo_dir(self.hub_dir, model)
        report = lambda done: self.emitter.progress(model, done, None)  # noqa: E731
        try:
            with GrowthWatcher(lambda: tree_size(repo / "blobs"), report):
                response = self.http.post(self._model_url(model), timeout=STREAM_TIMEOUT)
        except requests.RequestException as exc:
            raise ProvisionError(
                f"whisper model {model!r}: connection lost during download ({type(exc).__name__})",
                "run again: the Hugging Face download resumes",
            ) from None
        if response.status_code == 404:
            raise ProvisionError(f"whisper model {model!r}: unknown model ({error_text(response)})")
        if response.status_code == 401:
            raise ProvisionError(
                f"whisper model {model!r}: gated repository ({error_text(response)})",
                "set HF_TOKEN for the whisper service",
            )
        if response.status_code not in (200, 201):
            cause = error_text(response)
            raise ProvisionError(f"whisper model {model!r}: download failed ({cause})")
        self.emitter.progress(model, tree_size(repo / "blobs"), None, final=True)

    def _repair(self, model: str) -> None:
        """A broken cache entry: remove bad blobs and ask speaches to delete the repo.

        speaches answers 201 "already exists" for a repo with a snapshot, whatever its
        blobs hold, so the local copy must go before a new download.
        """
        repo = repo_dir(self.hub_dir, model)
        # the repo is the store: a bad blob behind a snapshot link goes too, nothing outside
        verifier = Verifier(self.verifier.cache, self.verifier.settle_seconds, store=repo)
        with contextlib.suppress(ProvisionError):  # no snapshot at all: nothing to remove
            remove_corrupt(verifier, expected_files(repo, model))
        response = self.http.delete(self._model_url(model), timeout=API_TIMEOUT)
        if response.status_code not in (200, 404):
            raise ProvisionError(f"whisper model {model!r}: delete failed ({error_text(response)})")

    def verify(self, model: str) -> ModelReport:
        repo = repo_dir(self.hub_dir, model)
        response = self.http.get(f"{self.url}/v1/models", timeout=API_TIMEOUT)
        if response.status_code != 200:
            raise ProvisionError(f"whisper model {model!r}: /v1/models {error_text(response)}")
        listed = {entry.get("id") for entry in response.json().get("data", [])}
        if model not in listed:
            raise ProvisionError(f"whisper model {model!r}: not listed by /v1/models")
        verifier = Verifier(self.verifier.cache, self.verifier.settle_seconds, store=repo)
        try:
            return ModelReport.of(model, verifier.verify(expected_files(repo, model)))
        except FileCheckError as exc:
            exc.message = f"whisper model {model!r}: {exc.message}"
            raise

    def listing(self) -> list[Listing]:
        found: dict[str, int | None] = {}
        for repo in sorted(self.hub_dir.glob("models--*--*")):
            model = repo.name.removeprefix("models--").replace("--", "/", 1)
            found[model] = tree_size(repo / "blobs")
        return merge_listing(self.models, found)
