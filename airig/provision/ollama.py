"""Ollama: pull through the streaming API, then prove the pull on disk.

A pull's ``{"status": "success"}`` is Ollama's opinion. The kit counts a model only when
``/api/show`` knows it and every blob its manifest names exists in ``blobs/`` with the
manifest's size and hashes to the manifest's digest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import requests

from airig.common.errors import ProvisionError
from airig.common.ollama_names import OllamaName, blob_path, manifest_names
from airig.provision.common import (
    Listing,
    ModelReport,
    ServerProvisioner,
    ensure_model,
    merge_listing,
    remove_corrupt,
)
from airig.provision.events import Emitter
from airig.provision.http import API_TIMEOUT, STREAM_TIMEOUT, error_text
from airig.provision.verify import ExpectedFile, FileCheckError, Verifier

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class PullProgress:
    """Sums per-layer ``completed``/``total`` of a pull stream into one model figure."""

    def __init__(self) -> None:
        self.layers: dict[str, tuple[int, int]] = {}

    def update(self, line: dict) -> bool:
        digest, total = line.get("digest"), line.get("total")
        if not isinstance(digest, str) or not isinstance(total, int):
            return False
        completed = line.get("completed")
        self.layers[digest] = (completed if isinstance(completed, int) else 0, total)
        return True

    @property
    def completed(self) -> int:
        return sum(done for done, _ in self.layers.values())

    @property
    def total(self) -> int:
        return sum(total for _, total in self.layers.values())


def read_pull_stream(
    model: str, lines: Iterable[bytes | str], on_progress: Callable[[int, int], None]
) -> None:
    """Consume an /api/pull NDJSON stream; return only if it ended in ``success``.

    Any line with an ``error`` key fails, even though Ollama sends it inside an HTTP 200
    once streaming has begun. A stream that ends without ``success`` is a dropped pull.
    """
    progress = PullProgress()
    for raw in lines:
        if not raw:
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            bad = f"{raw!r:.80}"
            raise ProvisionError(f"ollama model {model!r}: unreadable pull line {bad}") from None
        if not isinstance(line, dict):
            continue
        if "error" in line:
            raise ProvisionError(f"ollama model {model!r}: {line['error']}")
        if progress.update(line):
            on_progress(progress.completed, progress.total)
        if line.get("status") == "success":
            return
    raise ProvisionError(
        f"ollama model {model!r}: pull stream ended before success",
        "the connection dropped; run again and Ollama resumes the download",
    )


class OllamaProvisioner(ServerProvisioner):
    health_path = "/api/version"
    service = "ollama"

    def __init__(
        self,
        url: str,
        models_dir: Path,
        models: list[str],
        verifier: Verifier,
        emitter: Emitter,
        session: requests.Session | None = None,
    ) -> None:
        super().__init__(url, models, verifier, emitter, session)
        self.models_dir = models_dir

    def ensure(self, model: str, force: bool = False) -> ModelReport:
        return ensure_model(model, force, self.verify, self.pull, self._remove_corrupt)

    def pull(self, model: str) -> None:
        OllamaName.parse(model)
        try:
            with self.http.post(
                f"{self.url}/api/pull",
                json={"model": model, "stream": True},
                stream=True,
                timeout=STREAM_TIMEOUT,
            ) as response:
                if response.status_code != 200:
                    raise ProvisionError(f"ollama model {model!r}: {error_text(response)}")
                report = lambda done, total: self.emitter.progress(model, done, total)  # noqa: E731
                read_pull_stream(model, response.iter_lines(), report)
        except requests.RequestException as exc:
            raise ProvisionError(
                f"ollama model {model!r}: connection lost during pull ({type(exc).__name__})",
                "run again: Ollama resumes the partial download",
            ) from None

    def verify(self, model: str) -> ModelReport:
        name = OllamaName.parse(model)
        self._check_known(model)
        files = self.expected_files(model, name)
        try:
            return ModelReport.of(model, self.verifier.verify(files))
        except FileCheckError as exc:
            exc.message = f"ollama model {model!r}: {exc.message}"
            raise

    def _check_known(self, model: str) -> None:
        show = f"{self.url}/api/show"
        response = self.http.post(show, json={"model": model}, timeout=API_TIMEOUT)
        if response.status_code != 200:
            raise ProvisionError(f"ollama model {model!r}: /api/show {error_text(response)}")

    def expected_files(self, model: str, name: OllamaName) -> list[ExpectedFile]:
        """Config + layers of the manifest on disk, as files with size and digest."""
        path = name.manifest_path(self.models_dir)
        try:
            manifest = json.loads(path.read_bytes())
            entries = [manifest["config"], *manifest["layers"]]
        except FileNotFoundError:
            raise ProvisionError(f"ollama model {model!r}: no manifest at {path}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FileCheckError(
                path, f"ollama model {model!r}: unreadable manifest {path} ({exc})", corrupt=True
            ) from None
        files = []
        for entry in entries:
            digest, size = entry.get("digest"), entry.get("size")
            if (
                not isinstance(digest, str)
                or not _DIGEST.fullmatch(digest)
                or not isinstance(size, int)
            ):
                raise FileCheckError(
                    path, f"ollama model {model!r}: bad layer entry in {path}", corrupt=True
                )
            files.append(ExpectedFile(blob_path(self.models_dir, digest), size, digest[7:]))
        return files

    def _remove_corrupt(self, model: str) -> None:
        name = OllamaName.parse(model)
        try:
            files = self.expected_files(model, name)
        except FileCheckError as exc:
            exc.path.unlink(missing_ok=True)  # a broken manifest: the pull rewrites it
            return
        except ProvisionError:
            return
        remove_corrupt(self.verifier, files)

    def listing(self) -> list[Listing]:
        found: dict[str, int | None] = {}
        for name, path in manifest_names(self.models_dir):
            try:
                manifest = json.loads(path.read_bytes())
                entries = [manifest["config"], *manifest["layers"]]
                found[name.display] = sum(entry["size"] for entry in entries)
            except (OSError, ValueError, KeyError, TypeError):
                found[name.display] = None
        configured = [OllamaName.parse(m).display for m in self.models]
        return merge_listing(configured, found)
