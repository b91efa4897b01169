"""Ollama: pull through the streaming API, then prove the pull on disk.

A pull's ``{"status": "success"}`` is Ollama's opinion. The kit counts a model only when
``/api/show`` knows it and every blob its manifest names exists in ``blobs/`` with the
manifest's size and hashes to the manifest's digest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

# httpx only as the ollama client's transport: its timeout type and the errors the client
# passes on. The provisioners' own HTTP (health, /api/show, downloads) uses requests.
import httpx
import ollama
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
from airig.provision.http import API_TIMEOUT, error_text
from airig.provision.verify import ExpectedFile, FileCheckError, Verifier

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Connect fast, read forever: a pull may stay silent for minutes while the server hashes
# gigabytes, and closing the connection would cancel the pull.
PULL_TIMEOUT = httpx.Timeout(None, connect=10.0)


class PullProgress:
    """Sums per-layer ``completed``/``total`` of a pull stream into one model figure."""

    def __init__(self) -> None:
        self.layers: dict[str, tuple[int, int]] = {}

    def update(self, part: ollama.ProgressResponse) -> bool:
        if part.digest is None or part.total is None:
            return False
        self.layers[part.digest] = (part.completed or 0, part.total)
        return True

    @property
    def completed(self) -> int:
        return sum(done for done, _ in self.layers.values())

    @property
    def total(self) -> int:
        return sum(total for _, total in self.layers.values())


def read_pull_stream(
    model: str,
    parts: Iterable[ollama.ProgressResponse],
    on_progress: Callable[[int, int], None],
) -> None:
    """Consume ``Client.pull(model, stream=True)``; return only if it ended in ``success``.

    A stream that ends without ``success`` is a dropped pull.
    """
    progress = PullProgress()
    for part in _read(model, parts):
        if progress.update(part):
            on_progress(progress.completed, progress.total)
        if part.status == "success":
            return
    raise ProvisionError(
        f"ollama model {model!r}: pull stream ended before success",
        "the connection dropped; run again and Ollama resumes the download",
    )


def _read(
    model: str, parts: Iterable[ollama.ProgressResponse]
) -> Iterator[ollama.ProgressResponse]:
    """The client's parts, its refusals as ProvisionErrors naming the model. It raises
    ResponseError for an answer other than 200 and for a line with an ``error`` key, which
    Ollama sends inside an HTTP 200 once streaming has begun (status_code -1)."""
    iterator = iter(parts)
    while True:
        try:
            part = next(iterator)
        except StopIteration:
            return
        except ollama.ResponseError as exc:
            raise ProvisionError(f"ollama model {model!r}: {_refusal(exc)}") from None
        except (ValueError, AttributeError) as exc:  # not JSON, not an object, wrong types
            bad = f"{getattr(exc, 'doc', exc)!r:.80}"
            raise ProvisionError(f"ollama model {model!r}: unreadable pull line {bad}") from None
        yield part


def _refusal(exc: ollama.ResponseError) -> str:
    """Worded as ``error_text`` words an answer: the status, then the server's message."""
    if exc.status_code == -1:  # an error line inside the 200
        return str(exc.error)
    lines = str(exc.error).strip().splitlines()
    return f"HTTP {exc.status_code}" + (f": {lines[0][:200]}" if lines else "")


class OllamaProvisioner(ServerProvisioner):
    health_path = "/api/version"  # polled by wait_healthy (requests): the client has no call
    service = "ollama"

    def __init__(
        self,
        url: str,
        models_dir: Path,
        models: list[str],
        verifier: Verifier,
        emitter: Emitter,
        session: requests.Session | None = None,
        client: ollama.Client | None = None,
    ) -> None:
        super().__init__(url, models, verifier, emitter, session)
        self.models_dir = models_dir
        self.client = client or ollama.Client(host=self.url, timeout=PULL_TIMEOUT)

    def ensure(self, model: str, force: bool = False) -> ModelReport:
        return ensure_model(model, force, self.verify, self.pull, self._remove_corrupt)

    def pull(self, model: str) -> None:
        OllamaName.parse(model)
        report = lambda done, total: self.emitter.progress(model, done, total)  # noqa: E731
        try:
            read_pull_stream(model, self.client.pull(model, stream=True), report)
        except (httpx.RequestError, ConnectionError) as exc:
            # A streamed call lets httpx's errors through, even ConnectError (the client
            # makes that the builtin ConnectionError only outside streams).
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
        # Not client.show(): its ShowResponse requires model_info, which Ollama omits when
        # empty (api/types.go, omitempty); only the status matters here.
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
