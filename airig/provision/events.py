"""Structured progress lines: one JSON object per line on stdout.

The init containers speak only through these lines; the launcher (through
``airig.provision.progress``) turns them into progress bars and a summary table, and
``docker compose logs`` stays readable and parseable. Events:

- ``{"event": "progress", "service", "model", "completed", "total"}`` (total may be null)
- ``{"event": "verified", "service", "model", "size", "files", "cached"}``
- ``{"event": "failed", "service", "model", "error"}``
- ``{"event": "listed", "service", "model", "size", "configured", "present"}``
- ``{"event": "downloader", "service", "model", "tool", "reason"}`` (ComfyUI: which tool
  fetched the file, ``comfy-cli`` or ``range``; ``reason``: why not comfy-cli, or null)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

# At most this many progress lines per model per second: a multi-GB pull reports
# thousands of chunks and the logs must stay small.
PROGRESS_INTERVAL_SECONDS = 0.5


class Emitter:
    """Writes events for one service; throttles progress, never other events."""

    def __init__(
        self,
        service: str,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self._stream = stream or sys.stdout
        self._clock = clock
        self._last_progress: dict[str, float] = {}
        # Watcher threads report progress while the main thread reports results.
        self._lock = threading.Lock()

    def emit(self, event: str, model: str | None, **fields: Any) -> None:
        record = {"event": event, "service": self.service, "model": model, **fields}
        with self._lock:
            self._stream.write(json.dumps(record, separators=(", ", ": ")) + "\n")
            self._stream.flush()

    def progress(self, model: str, completed: int, total: int | None, final: bool = False) -> None:
        now = self._clock()
        last = self._last_progress.get(model)
        if not final and last is not None and now - last < PROGRESS_INTERVAL_SECONDS:
            return
        self._last_progress[model] = now
        self.emit("progress", model, completed=completed, total=total)

    def verified(self, model: str, size: int, files: int, cached: bool) -> None:
        self.emit("verified", model, size=size, files=files, cached=cached)

    def failed(self, model: str | None, error: str) -> None:
        self.emit("failed", model, error=error)

    def downloader(self, model: str, tool: str, reason: str | None) -> None:
        self.emit("downloader", model, tool=tool, reason=reason)

    def listed(self, model: str, size: int | None, configured: bool, present: bool) -> None:
        self.emit("listed", model, size=size, configured=configured, present=present)
