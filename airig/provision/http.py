"""HTTP helpers shared by the three provisioners: health waits and short error text."""

from __future__ import annotations

import time
from collections.abc import Callable

import requests

from airig.common.errors import ProvisionError

# Connect fast, read forever: a model pull may stay silent for minutes while the server
# hashes gigabytes, and closing the connection would cancel the pull.
STREAM_TIMEOUT = (10.0, None)
# Ordinary API calls answer quickly.
API_TIMEOUT = (10.0, 60.0)


def wait_healthy(
    service: str,
    url: str,
    timeout_seconds: float,
    session: requests.Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Poll ``url`` until it answers 2xx; ProvisionError after ``timeout_seconds``."""
    http = session or requests.Session()
    deadline = time.monotonic() + timeout_seconds
    last = "no answer"
    while True:
        try:
            response = http.get(url, timeout=5)
            if response.ok:
                return
            last = f"HTTP {response.status_code}"
        except requests.RequestException as exc:
            last = type(exc).__name__
        if time.monotonic() >= deadline:
            raise ProvisionError(
                f"{service} at {url} not healthy after {timeout_seconds:.0f} s ({last})",
                f"check `docker compose logs {service}`",
            )
        sleep(1.0)


def error_text(response: requests.Response) -> str:
    """The server's own error message if it sent one, else the status line."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("error", "detail", "message"):
            if isinstance(body.get(key), str):
                return f"HTTP {response.status_code}: {body[key]}"
    text = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    return f"HTTP {response.status_code}" + (f": {text}" if text else "")
