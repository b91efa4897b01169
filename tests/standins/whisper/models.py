"""Models held in memory by the speaches stand-in, as speaches v0.8.3 keeps them.

- executors/whisper/model_manager.py WhisperModelManager.load_model registers the model
  under its id *before* loading it; unload_model raises KeyError for an id it does not
  hold ("Model not found", 404 in routers/misc.py).
- model_manager.py SelfDisposingModel: `with model:` loads on first use (load_fn may
  raise: the id stays registered, unloaded) and counts references; when the last one
  leaves, the model unloads after `ttl` seconds (WHISPER__TTL, default 300 in
  config.py WhisperConfig.ttl; 0 = at once, -1 = never). unload() refuses with
  ValueError "Model <id> is not loaded. self.ref_count=<n>" or "... is still in use.
  self.ref_count=<n>" (409 in routers/misc.py).
- The load is faster_whisper WhisperModel(model_id) (faster-whisper 1.1.1, locked by
  speaches 0.8.3): utils.download_model fetches the repo from the hub when it is missing
  (here: from the catalogue), falls back to the local cache when the hub refuses, and
  raises when neither has it; an id without "/" must be a known size name.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from hub import HubCache, in_registry

# faster_whisper/utils.py _MODELS (the size names used here map to Systran's repos)
SIZE_NAMES = {
    size: f"Systran/faster-whisper-{size}"
    for size in ("tiny", "tiny.en", "base", "base.en", "small", "small.en", "medium")
}


class LoadError(Exception):
    """faster-whisper could not load the model (an unhandled error upstream: HTTP 500)."""


class Model:
    """speaches' SelfDisposingModel without the weights."""

    def __init__(self, model_id: str, manager: ModelManager):
        self.model_id = model_id
        self.manager = manager
        self.ref_count = 0
        self.loaded = False
        self.lock = threading.RLock()
        self.timer: threading.Timer | None = None

    def unload(self) -> None:
        with self.lock:
            if not self.loaded:
                raise ValueError(f"Model {self.model_id} is not loaded. {self.ref_count=}")
            if self.ref_count > 0:
                raise ValueError(f"Model {self.model_id} is still in use. {self.ref_count=}")
            if self.timer:
                self.timer.cancel()
            self.loaded = False
            self.manager.forget(self.model_id)

    def __enter__(self) -> Model:
        with self.lock:
            if not self.loaded:
                self.manager.load_weights(self.model_id)
                self.loaded = True
            self.ref_count += 1
            if self.timer:
                self.timer.cancel()
            return self

    def __exit__(self, *_exc: object) -> None:
        with self.lock:
            self.ref_count -= 1
            if self.ref_count > 0:
                return
            ttl = self.manager.ttl
            if ttl > 0:
                self.timer = threading.Timer(ttl, self._expire)
                self.timer.daemon = True
                self.timer.start()
            elif ttl == 0:
                self.unload()

    def _expire(self) -> None:
        # in use again, or already gone: upstream's timer thread dies with the error
        with contextlib.suppress(ValueError):
            self.unload()


class ModelManager:
    def __init__(self, cache: HubCache):
        self.cache = cache
        self.ttl = int(os.environ.get("WHISPER__TTL", "300"))
        self.loaded: dict[str, Model] = {}
        self._lock = threading.Lock()

    def load_model(self, model_id: str) -> Model:
        with self._lock:
            if model_id not in self.loaded:
                self.loaded[model_id] = Model(model_id, self)
            return self.loaded[model_id]

    def unload_model(self, model_id: str) -> None:
        with self._lock:
            model = self.loaded.get(model_id)
        if model is None:
            raise KeyError(f"Model {model_id} not found")
        model.unload()

    def forget(self, model_id: str) -> None:
        with self._lock:
            self.loaded.pop(model_id, None)

    def load_weights(self, model_id: str) -> None:
        """WhisperModel(model_id): download_model, then read the files."""
        repo_id = model_id if "/" in model_id else SIZE_NAMES.get(model_id)
        if repo_id is None:
            raise LoadError(f"Invalid model size '{model_id}'")
        if in_registry(repo_id):
            self.cache.download(repo_id)
        elif self.cache.snapshot(repo_id) is None:
            raise LoadError(f"Cannot find an appropriate cached snapshot folder for {repo_id}")
        time.sleep(float(os.environ.get("STANDIN_LOAD_SECONDS", "0.05")))
