"""02-compute's `models-ready` gate.

Compose starts it only after every init container exited 0 (service_completed_successfully),
so its health means "every model named in .env is pulled and verified". It also serves the
verified-model inventory that the init containers recorded, for `status` and the workers.
Anything else is refused with the kit's one error body (airig/common/http_errors.py).

    python -m airig.services.gate            serve on :8099 (GET /health, GET /models)
                                    on GATE_LISTEN_HOST (default 127.0.0.1; compose: 0.0.0.0)
    python -m airig.services.gate --check    healthcheck: exit 0 when the server answers
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from airig.common.http_errors import error_bytes

PORT = 8099


def inventory(cache_paths: list[Path]) -> dict:
    """Merge the init containers' verify caches: {cache path: its JSON, or an error}."""
    out: dict = {}
    for path in cache_paths:
        try:
            out[str(path)] = json.loads(path.read_text())
        except FileNotFoundError:
            out[str(path)] = {"error": "not written (no models configured?)"}
        except (OSError, ValueError) as exc:
            out[str(path)] = {"error": f"unreadable: {exc}"}
    return out


def _cache_paths() -> list[Path]:
    raw = os.environ.get("AIRIG_VERIFY_CACHES", "")
    return [Path(p) for p in raw.split(",") if p.strip()]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/models":
            self._send(200, inventory(_cache_paths()))
        else:
            self._send_bytes(404, error_bytes(404, f"no route {self.path}; GET /health or /models"))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (an unsupported method, a malformed request line)
        in the kit's one error body instead of its HTML page."""
        self.log_error("code %d, message %s", code, message)
        short, _ = self.responses.get(code, ("error", ""))
        self.close_connection = True
        self._send_bytes(code, error_bytes(code, message or short), last=True)

    def _send(self, code: int, body: dict) -> None:
        self._send_bytes(code, json.dumps(body).encode())

    def _send_bytes(self, code: int, data: bytes, last: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if last:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, fmt: str, *args) -> None:  # keep logs to one JSON line a request
        print(json.dumps({"event": "gate.request", "line": fmt % args}), flush=True)


def listen_host() -> str:
    """Loopback unless told otherwise: only compose, inside the container, sets 0.0.0.0."""
    return os.environ.get("GATE_LISTEN_HOST", "").strip() or "127.0.0.1"


def check(port: int = PORT) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=4):
            return 0
    except OSError:
        return 1


def main(argv: list[str]) -> int:
    if "--check" in argv:
        return check()
    print(json.dumps({"event": "gate.ready", "caches": [str(p) for p in _cache_paths()]}))
    server = GateServer((listen_host(), PORT), _Handler)
    stop_on_sigterm(server)
    server.serve_forever()
    server.server_close()
    print(json.dumps({"event": "gate.stopped"}), flush=True)
    return 0


class GateServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (the healthcheck killed at its timeout, a reset
        # keep-alive connection) is not the gate's error: no traceback in its log, which
        # the kit's watch test reads for error lines.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def stop_on_sigterm(server: ThreadingHTTPServer) -> None:
    """Stop serving on SIGTERM. The gate is PID 1 in its container, and the kernel drops a
    signal PID 1 has no handler for: without this, `docker stop` waited out the grace
    period and SIGKILLed it (exit 137). shutdown() waits for serve_forever, which runs in
    this same thread, so it is called from another one."""

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
