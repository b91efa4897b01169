"""A gateway on loopback that honours the brain's contract (``POST /v1/complete``, bearer
token, the kit's error body ``{"detail", "retryable", "retry_after_s"}``, idempotent
``request_id``) and answers from a script, recording every request it was sent. It
stands in for airig/gateway/ in the escalation tests that need control over each answer
(a held answer, huge usage, down)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from airig.common.http_errors import error_body

Answer = Callable[[dict[str, Any]], str]


class FakeGateway:
    def __init__(self, token: str, port: int = 0) -> None:
        self.token = token
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.answers: dict[str, str] = {}  # request_id -> text already answered
        self.usage = (1200, 300)
        self.hold = threading.Event()  # set: answers are held until it is cleared
        self.script: Answer = lambda body: json.dumps({"answer": "from outside"})
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> FakeGateway:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"ok": True, "provider": "fake", "model": "fake-1",
                                 "key_loaded": True})  # fmt: skip

            def do_POST(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {gateway.token}":
                    self._send(401, error_body(401, "wrong token"))
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                gateway.requests.append(body)
                while gateway.hold.is_set():
                    threading.Event().wait(0.05)
                request_id = body["request_id"]
                if request_id not in gateway.answers:  # idempotent: one answer per id
                    gateway.answers[request_id] = gateway.script(body)
                tokens_in, tokens_out = gateway.usage
                self._send(200, {
                    "request_id": request_id, "provider": "fake", "model": "fake-1",
                    "text": gateway.answers[request_id], "input_tokens": tokens_in,
                    "output_tokens": tokens_out, "stop_reason": "end_turn",
                })  # fmt: skip

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
