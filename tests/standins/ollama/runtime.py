"""Loaded-model bookkeeping and deterministic 'inference' of the Ollama stand-in.

Loading takes STANDIN_LOAD_SECONDS the first time a model is used; loaded models
expire after their keep_alive (OLLAMA_KEEP_ALIVE default, per-request override) and
OLLAMA_MAX_LOADED_MODELS evicts the least recently used one, as upstream's scheduler.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

FOREVER = timedelta(days=365 * 290)  # what a negative keep_alive means upstream
EMBED_DIMENSIONS = 64
_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def parse_keep_alive(value: object) -> timedelta:
    """keep_alive as Ollama reads it: seconds as a number, or a Go duration string
    ("5m", "1h30m", "-1"); any negative value means forever."""
    if value is None or value == "":
        value = os.environ.get("OLLAMA_KEEP_ALIVE", "5m")
    if isinstance(value, int | float):
        seconds = float(value)
    elif re.fullmatch(r"-?\d+(\.\d+)?", str(value)):
        seconds = float(str(value))
    else:
        parts = _DURATION.findall(str(value))
        if not parts or "".join(n + u for n, u in parts) != str(value):
            raise ValueError(f"time: invalid duration {value!r}")
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    return FOREVER if seconds < 0 else timedelta(seconds=seconds)


@dataclass
class LoadedModel:
    name: str
    size: int
    digest: str
    details: dict
    expires_at: datetime
    last_used: float = field(default_factory=time.monotonic)


class Runtime:
    def __init__(self) -> None:
        self._loaded: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()

    def _drop_expired(self) -> None:
        now = datetime.now(UTC)
        for name in [n for n, m in self._loaded.items() if m.expires_at <= now]:
            del self._loaded[name]

    def ensure_loaded(self, model: LoadedModel, keep_alive: timedelta) -> float:
        """Load (or refresh) a model; returns the seconds spent loading."""
        with self._lock:
            self._drop_expired()
            loaded = self._loaded.get(model.name)
            load_seconds = 0.0
            if loaded is None:
                load_seconds = float(os.environ.get("STANDIN_LOAD_SECONDS", "0.2"))
                time.sleep(load_seconds)
                self._evict_for_one_more()
                loaded = self._loaded[model.name] = model
            loaded.last_used = time.monotonic()
            loaded.expires_at = datetime.now(UTC) + keep_alive
            return load_seconds

    def _evict_for_one_more(self) -> None:
        limit = int(os.environ.get("OLLAMA_MAX_LOADED_MODELS", "0") or 0)
        while limit > 0 and len(self._loaded) >= limit:
            oldest = min(self._loaded.values(), key=lambda m: m.last_used)
            del self._loaded[oldest.name]

    def unload(self, name: str) -> None:
        with self._lock:
            self._loaded.pop(name, None)

    def running(self) -> list[LoadedModel]:
        with self._lock:
            self._drop_expired()
            return sorted(self._loaded.values(), key=lambda m: m.name)


def reply_words(model: str, prompt: str, limit: int | None) -> list[str]:
    """The deterministic answer: a summary tests can assert on."""
    words = prompt.split()
    tag = hashlib.sha256(f"{model}\n{prompt}".encode()).hexdigest()[:8]
    reply = [f"[{model}]", f"{len(words)}", "words:", *words[:8], f"#{tag}"]
    return reply[:limit] if limit is not None and limit >= 0 else reply


def embedding(model: str, text: str) -> list[float]:
    """A unit vector derived from the model and the text's words: each lowercased word
    hashed (with the model's name) into one of EMBED_DIMENSIONS dimensions, with a sign, so
    texts that share words lie near each other (search tests find a document by its words)
    and two models' vectors differ. A text without words: a hash of the whole text."""
    raw = [0.0] * EMBED_DIMENSIONS
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(f"{model}\n{word}".encode()).digest()
        slot = int.from_bytes(digest[:4], "big") % EMBED_DIMENSIONS
        raw[slot] += 1.0 if digest[4] & 1 else -1.0
    if not any(raw):
        digest = hashlib.sha256(f"{model}\n{text}".encode()).digest()
        raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(EMBED_DIMENSIONS)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [round(v / norm, 6) for v in raw]


def eval_metrics(prompt: str, words: list[str], load_seconds: float) -> dict:
    """Ollama's timing fields in nanoseconds, at STANDIN_TOKENS_PER_SECOND."""
    rate = float(os.environ.get("STANDIN_TOKENS_PER_SECOND", "50"))
    eval_ns = int(len(words) / rate * 1e9)
    prompt_count = max(1, len(prompt.split()))
    prompt_ns = int(prompt_count / (rate * 10) * 1e9)
    load_ns = int(load_seconds * 1e9)
    return {
        "total_duration": load_ns + prompt_ns + eval_ns,
        "load_duration": load_ns,
        "prompt_eval_count": prompt_count,
        "prompt_eval_duration": prompt_ns,
        "eval_count": len(words),
        "eval_duration": eval_ns,
    }
