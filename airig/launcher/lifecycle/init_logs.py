"""Follow the init containers' logs while `compose up --wait` runs, for live progress bars.

Compose creates every container first but starts an init container only once its model
server is healthy, and `docker compose logs --follow` returns at once for containers that
are not running yet. So this polls the engine for the stack's init containers and
streams each run's log in its own thread, from the moment this `up` began (a second
`up` starts the same exited container again: its earlier run's lines are not news).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

_DONE = object()


def started_at(container: Any) -> float | None:
    """The container's last start as a UNIX time, or None if it never started."""
    text = (container.attrs.get("State") or {}).get("StartedAt") or ""
    if not text or text.startswith("0001-"):
        return None
    # Docker prints nanoseconds; Python's parser takes at most microseconds.
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        stamp = datetime.fromisoformat(f"{head}.{(frac or '0')[:6]:0<6}+00:00")
    except ValueError:
        return None
    return stamp.timestamp()


class InitLogs:
    """Lines of the named services' containers in ``project`` that started after ``since``."""

    def __init__(
        self, sdk: Any, project: str, services: tuple[str, ...], since: float, poll_s: float = 0.5
    ) -> None:
        self._sdk, self._project, self._services = sdk, project, set(services)
        self._since, self._poll_s = since, poll_s
        self._lines: queue.Queue[object] = queue.Queue()
        self._closing = threading.Event()
        self._followed: set[tuple[str, float]] = set()
        self._streams: list[threading.Thread] = []
        self._poller = threading.Thread(target=self._poll, name="init-logs", daemon=True)

    def start(self) -> InitLogs:
        self._poller.start()
        return self

    def close(self) -> None:
        """`up` has returned: scan once more, let the streams drain, then end ``lines``."""
        self._closing.set()

    def lines(self) -> Iterator[str]:
        while True:
            item = self._lines.get()
            if not isinstance(item, str):  # _DONE
                return
            yield item

    # ------------------------------------------------------------------ threads
    def _poll(self) -> None:
        try:
            while True:
                closing = self._closing.is_set()
                self._scan()
                if closing:
                    break
                self._closing.wait(self._poll_s)
            for stream in self._streams:
                # Init containers have exited when `up --wait` returns, so their streams
                # end; the bound only covers an engine that stops answering.
                stream.join(timeout=30)
        finally:
            self._lines.put(_DONE)

    def _scan(self) -> None:
        try:
            # one removed between the list and its inspect (compose recreating it) is left
            # out, and the others are still followed; its successor is found next scan
            containers = self._sdk.containers.list(
                all=True,
                filters={"label": f"com.docker.compose.project={self._project}"},
                ignore_removed=True,
            )
        except Exception:  # noqa: BLE001 - progress is a view: never fail `up` over it
            return
        for container in containers:
            if container.labels.get("com.docker.compose.service") not in self._services:
                continue
            start = started_at(container)
            key = (container.id, start or 0.0)
            # 1 s of slack: the engine's clock and ours are the same host's, but the
            # engine rounds nothing while `since` below is taken before compose starts.
            if start is None or start < self._since - 1 or key in self._followed:
                continue
            self._followed.add(key)
            stream = threading.Thread(
                target=self._stream, args=(container,), name=f"logs-{container.name}", daemon=True
            )
            self._streams.append(stream)
            stream.start()

    def _stream(self, container: Any) -> None:
        buffer = b""
        try:
            for chunk in container.logs(stream=True, follow=True, since=self._since - 1):
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for line in complete:
                    self._lines.put(line.decode(errors="replace"))
        except Exception:  # noqa: BLE001 - a removed container ends its stream, nothing more
            pass
        if buffer:
            self._lines.put(buffer.decode(errors="replace"))
