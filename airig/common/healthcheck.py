"""The kit's container healthchecks, on the standard library alone.

Docker starts a healthcheck as a new process in its container at every interval (5-10 s),
for as long as the kit runs. A check that built its service's settings imported pydantic
first: 0.2 s of CPU for the brain's check, 0.3 s for a worker's, against 0.05 s for this
module (measured on the CI host, `python -m airig.brain --check` against this). On a rig
with seven workers that was a fifth of a core spent asking "are you alive?", and on the
2-core CI host the e2e kits' checks competed with the tests. So ``--check`` reads its one
setting from the environment here, by the name and default the service's settings
declare (the pairs below; tests/unit/test_healthchecks.py keeps them equal), and the
services' ``__main__`` modules hand ``--check`` to this module before importing anything
else.

Each check prints one line on stderr when it fails (Docker keeps it in the container's
health log, where `status`, `doctor` and `triage` quote it) and exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

# (environment variable, default) as airig/brain/settings.py (listen_port),
# airig/gateway/settings.py (port) and airig/worker/settings.py (state_file) declare them.
BRAIN_PORT = ("BRAIN_LISTEN_PORT", "8080")
GATEWAY_PORT = ("AIRIG_GATEWAY_PORT", "8070")
WORKER_STATE_FILE = ("WORKER_STATE_FILE", "/tmp/airig-worker.json")
TIMEOUT_S = 3  # under the compose files' `timeout: 5s`, so the check reports, not Docker
MAX_BODY = 1 << 16  # a health answer is a few hundred bytes; a larger one is not ours


class Unhealthy(Exception):
    """What a failed check prints (one line)."""


def setting(pair: tuple[str, str]) -> str:
    name, default = pair
    value = os.environ.get(name, "").strip()
    return value or default


def port(pair: tuple[str, str]) -> int:
    text = setting(pair)
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise Unhealthy(f"{pair[0]}={text!r} is not a port (1-65535)")
    return int(text)


def get_json(url: str) -> dict[str, Any]:
    """The JSON object ``url`` answers with; an HTTP error's body's ``detail`` is named."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            body = json.loads(response.read(MAX_BODY))
    except urllib.error.HTTPError as exc:  # e.g. the brain's 503: a store it cannot write
        try:
            detail = json.loads(exc.read(MAX_BODY)).get("detail")
        except (OSError, ValueError, AttributeError):
            detail = None
        raise Unhealthy(f"HTTP {exc.code}" + (f": {detail}" if detail else "")) from None
    except (OSError, ValueError) as exc:  # URLError is an OSError; ValueError: not JSON
        raise Unhealthy(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(body, dict):
        raise Unhealthy("its /health answer is not a JSON object")
    return body


def brain(listen_port: int | None = None) -> None:
    """The brain answers /health with status ok."""
    at = listen_port if listen_port is not None else port(BRAIN_PORT)
    body = get_json(f"http://127.0.0.1:{at}/health")
    if body.get("status") != "ok":
        raise Unhealthy(f"status {body.get('status')!r}")


def gateway(listen_port: int | None = None) -> None:
    """The gateway answers /health, ok, with a provider key loaded."""
    at = listen_port if listen_port is not None else port(GATEWAY_PORT)
    body = get_json(f"http://127.0.0.1:{at}/health")
    if not body.get("key_loaded"):
        raise Unhealthy("no provider key loaded")
    if not body.get("ok"):
        raise Unhealthy("its /health says not ok")


def worker(max_age_s: float, state_file: str | None = None) -> None:
    """The worker's heartbeat thread wrote a successful beat within ``max_age_s``: it
    registered, and the brain answers it (airig/worker/heartbeat.py writes the file)."""
    path = state_file or setting(WORKER_STATE_FILE)
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read(MAX_BODY))
        at = float(state.get("at", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        raise Unhealthy("no heartbeat has succeeded yet") from None
    age = time.time() - at
    # abs: a beat "from the future" (infinity, or a clock stepped far back) proves nothing
    # either; the next beat writes a time again. `not <=`: NaN is not recent.
    if not state.get("ok") or not abs(age) <= max_age_s:
        raise Unhealthy(f"last good heartbeat {age:.0f}s ago")


def run(name: str, check: Callable[[], None]) -> int:
    """0 when ``check`` passes; else its line on stderr and 1."""
    try:
        check()
    except Unhealthy as exc:
        print(f"{name} unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0
