"""On-disk model store of the Ollama stand-in: manifests, blobs, pulls.

The layout is Ollama's own (server/images.go, manifest/*.go), so the kit's checks
that read the store directly behave exactly as against a real Ollama:
  <root>/manifests/<host>/<namespace>/<model>/<tag>   manifest JSON
  <root>/blobs/sha256-<hex>                           content-addressed blobs
Blob contents are pseudo-random bytes derived from the model name, so digests are
stable between runs and a re-pull finds the same blobs.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from names import ModelName, fails_midstream, in_catalogue

MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
CHUNK = 256 * 1024

Progress = Callable[[dict], None]


class PullError(Exception):
    """A pull failure; its text is what Ollama puts in the `error` line."""


def is_embedding_model(name: ModelName) -> bool:
    return "embed" in name.model


# The stand-in's rule for a vision model (upstream reads it from the model's files: a
# projector layer or vision tensors, server/images.go Capabilities): the model part of the
# name (no tag) contains "vision" or "llava", or ends in "vl" / "-vl" (qwen2.5vl,
# qwen3-vl, llama3.2-vision, llava). Such a model reports "vision" in /api/show.
def is_vision_model(name: ModelName) -> bool:
    model = name.model.lower()
    return "vision" in model or "llava" in model or model.endswith("vl")


def capabilities(name: ModelName) -> list[str]:
    """/api/show's `capabilities` (types/model/capability.go names)."""
    if is_embedding_model(name):
        return ["embedding"]
    return ["completion", "vision"] if is_vision_model(name) else ["completion"]


def model_family(name: ModelName) -> str:
    return "nomic-bert" if is_embedding_model(name) else name.model.split(".")[0].split("-")[0]


def deterministic_chunks(seed: str, size: int) -> Iterator[bytes]:
    """Pseudo-random bytes in CHUNK pieces; the same seed and size give the same bytes."""
    for index, offset in enumerate(range(0, size, CHUNK)):
        yield hashlib.shake_256(f"{seed}#{index}".encode()).digest(min(CHUNK, size - offset))


@dataclass(frozen=True)
class Layer:
    media_type: str
    seed: str
    size: int
    inline: bytes | None = None  # small layers are literal bytes, big ones are generated

    def chunks(self) -> Iterator[bytes]:
        if self.inline is not None:
            yield self.inline
        else:
            yield from deterministic_chunks(self.seed, self.size)

    def chunks_from(self, offset: int) -> Iterator[bytes]:
        """The bytes from `offset` on, to resume a partial download."""
        position = 0
        for chunk in self.chunks():
            end = position + len(chunk)
            if end > offset:
                yield chunk[max(0, offset - position) :]
            position = end

    @property
    def digest(self) -> str:
        return "sha256:" + _digest_of(self)

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


_DIGESTS: dict[Layer, str] = {}


def _digest_of(layer: Layer) -> str:
    if layer not in _DIGESTS:
        hasher = hashlib.sha256()
        for chunk in layer.chunks():
            hasher.update(chunk)
        _DIGESTS[layer] = hasher.hexdigest()
    return _DIGESTS[layer]


def _inline(media_type: str, data: bytes) -> Layer:
    return Layer(media_type, "", len(data), data)


def remote_layers(name: ModelName, model_bytes: int) -> tuple[Layer, list[Layer]]:
    """The config and layers the 'registry' serves for `name`."""
    family = model_family(name)
    config = {
        "model_format": "gguf",
        "model_family": family,
        "model_families": [family],
        "model_type": "137M" if is_embedding_model(name) else "7.6B",
        "file_type": "F16" if is_embedding_model(name) else "Q4_K_M",
        "architecture": "amd64",
        "os": "linux",
    }
    params = {"num_ctx": 8192} if is_embedding_model(name) else {"stop": ["<|im_end|>"]}
    layers = [
        Layer("application/vnd.ollama.image.model", f"{name.display}:model", model_bytes),
        _inline("application/vnd.ollama.image.template", b"{{ .System }}\n{{ .Prompt }}"),
        _inline("application/vnd.ollama.image.params", json.dumps(params).encode()),
    ]
    return _inline(CONFIG_MEDIA_TYPE, json.dumps(config).encode()), layers


class ModelStore:
    def __init__(self, root: Path, model_bytes: int):
        self.root = root
        self.model_bytes = model_bytes
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock_for(self, digest: str) -> threading.Lock:
        # One writer per blob, as upstream's blobDownloadManager: concurrent pulls of
        # the same model must not interleave writes to one -partial file.
        with self._locks_guard:
            return self._locks.setdefault(digest, threading.Lock())

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest.replace(":", "-")

    def manifest_path(self, name: ModelName) -> Path:
        return self.root / "manifests" / name.host / name.namespace / name.model / name.tag

    def read_manifest(self, name: ModelName) -> dict | None:
        try:
            return json.loads(self.manifest_path(name).read_bytes())
        except (OSError, ValueError):
            return None

    def list_models(self) -> list[tuple[ModelName, Path]]:
        top = self.root / "manifests"
        found = []
        for path in sorted(top.glob("*/*/*/*")):
            if path.is_file():
                host, namespace, model, tag = path.relative_to(top).parts
                found.append((ModelName(host, namespace, model, tag), path))
        return found

    def config_of(self, manifest: dict) -> dict:
        try:
            return json.loads(self.blob_path(manifest["config"]["digest"]).read_bytes())
        except (OSError, ValueError, KeyError):
            return {}

    def pull(self, name: ModelName, progress: Progress) -> None:
        """Pull as Ollama does: manifest, each blob (partial file, then rename),
        verify, write the manifest. Raises PullError with upstream's wording."""
        progress({"status": "pulling manifest"})
        if not in_catalogue(name):
            # server/images.go PullModel: pullModelManifest gets the registry's 404 as
            # os.ErrNotExist (makeRequestWithRetry) and wraps it "pull model manifest: %s".
            raise PullError("pull model manifest: file does not exist")
        config, layers = remote_layers(name, self.model_bytes)
        fail_midstream = fails_midstream(name)
        fetched = [self._download(layer, progress, fail_midstream) for layer in [*layers, config]]
        progress({"status": "verifying sha256 digest"})
        for layer, was_fetched in zip([*layers, config], fetched, strict=True):
            if was_fetched:
                self._verify(layer)
        progress({"status": "writing manifest"})
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": config.descriptor(),
            "layers": [layer.descriptor() for layer in layers],
        }
        path = self.manifest_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(json.dumps(manifest).encode())
        progress({"status": "success"})

    def _download(self, layer: Layer, progress: Progress, fail_midstream: bool) -> bool:
        """Write one blob; False when it was already there (a cache hit, no verify)."""
        digest = layer.digest
        with self._lock_for(digest):
            return self._download_locked(layer, digest, progress, fail_midstream)

    def _download_locked(
        self, layer: Layer, digest: str, progress: Progress, fail_midstream: bool
    ) -> bool:
        status = f"pulling {digest[7:19]}"
        final = self.blob_path(digest)
        if final.is_file() and final.stat().st_size == layer.size:
            progress(
                {"status": status, "digest": digest, "total": layer.size, "completed": layer.size}
            )
            return False
        final.parent.mkdir(parents=True, exist_ok=True)
        partial = final.with_name(final.name + "-partial")
        done = partial.stat().st_size if partial.exists() else 0
        delay = float(os.environ.get("STANDIN_PULL_CHUNK_SECONDS", "0"))
        with partial.open("ab") as out:
            for chunk in layer.chunks_from(done):
                out.write(chunk)
                done += len(chunk)
                progress(
                    {"status": status, "digest": digest, "total": layer.size, "completed": done}
                )
                if fail_midstream and done >= layer.size // 2:
                    out.flush()
                    raise PullError(f"max retries exceeded: unexpected EOF ({digest})")
                time.sleep(delay)
        os.replace(partial, final)
        return True

    def _verify(self, layer: Layer) -> None:
        path = self.blob_path(layer.digest)
        hasher = hashlib.sha256()
        with path.open("rb") as blob:
            for chunk in iter(lambda: blob.read(CHUNK), b""):
                hasher.update(chunk)
        if "sha256:" + hasher.hexdigest() != layer.digest:
            path.unlink(missing_ok=True)
            raise PullError(
                f"digest mismatch, file must be downloaded again: want {layer.digest}, "
                f"got sha256:{hasher.hexdigest()}"
            )


class PullCancelled(Exception):
    """The client went away mid-pull."""


def stream_pull(store: ModelStore, name: ModelName) -> Iterator[dict]:
    """Progress lines as they happen; an error after the stream began is one more
    `{"error": ...}` line (inside the HTTP 200), exactly as upstream. A client that
    disconnects cancels the pull and leaves the -partial blob for the next pull."""
    lines: queue.Queue[dict | None] = queue.Queue()
    cancelled = threading.Event()

    def progress(line: dict) -> None:
        if cancelled.is_set():
            raise PullCancelled
        lines.put(line)

    def work() -> None:
        try:
            store.pull(name, progress)
        except PullError as exc:
            lines.put({"error": str(exc)})
        except PullCancelled:
            pass
        finally:
            lines.put(None)

    threading.Thread(target=work, daemon=True).start()
    try:
        while (line := lines.get()) is not None:
            yield line
    finally:
        cancelled.set()
