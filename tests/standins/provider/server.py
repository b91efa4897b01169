"""External provider stand-in for tests: an OpenAI-compatible ``POST /v1/chat/completions``
and an Anthropic ``POST /v1/messages``, answering and refusing in the upstream shapes
(shapes.py names each source), scriptable, and recording every request.

Run: python server.py [--host H] [--port N] [--root DIR]   (DIR/requests.jsonl: the log)
Knobs: STANDIN_PROVIDER_KEY (the one key both APIs accept), STANDIN_PROVIDER_MODELS
(comma list of models that exist; others are a 404 as upstream).
Script it over HTTP (no auth; tests only):
  POST /_standin/answers {"answers": ["text", {"text": "...", "delay_s": 0.5}]}  queued
  POST /_standin/mode    {"mode": "up"|"down"|"rate_limited", "times": N, "retry_after": S,
                          "status": CODE}   (times absent = until the next mode)
  GET  /_standin/requests   every request so far (keys replaced by "ok"/"wrong"/"missing")
  POST /_standin/reset      queue, mode and records emptied
  GET  /health
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from images import Refused, anthropic_check, openai_check
from shapes import (
    OPENAI_NO_KEY,
    anthropic_error,
    anthropic_message,
    new_id,
    openai_completion,
    openai_error,
    openai_wrong_key,
    words,
)

DEFAULT_KEY = "sk-standin-0123456789abcdef0123456789abcdef"
DEFAULT_MODELS = "gpt-4.1-mini,gpt-4.1,claude-sonnet-5-5,claude-haiku-4-5"
# The Messages API wants a dated version header (the client sends its own, e.g. 2023-06-01).
VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")
SECRET_HEADERS = ("authorization", "x-api-key")


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class State:
    """What tests script and what they read back; shared by the handler threads."""

    def __init__(self, key: str, models: set[str], log_path: Path) -> None:
        self.key, self.models, self.log_path = key, models, log_path
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.answers: list[dict[str, Any]] = []
            self.mode: dict[str, Any] = {"mode": "up"}
            self.records: list[dict[str, Any]] = []
        self.log_path.write_text("")

    def failing_mode(self) -> dict[str, Any] | None:
        """The mode this request meets (and one fewer left), or None when up."""
        with self.lock:
            mode = self.mode
            if mode["mode"] == "up":
                return None
            times = mode.get("times")
            if times is not None:
                if times <= 0:
                    self.mode = {"mode": "up"}
                    return None
                mode["times"] = times - 1
            return dict(mode)

    def next_answer(self) -> dict[str, Any] | None:
        with self.lock:
            return self.answers.pop(0) if self.answers else None

    def record(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry)
        with self.lock:
            self.records.append(entry)
            with self.log_path.open("a") as log:
                log.write(line + "\n")


def default_answer(model: str, prompt: str) -> str:
    """Deterministic: the model, the prompt's size, its first words, a hash."""
    head = " ".join(prompt.split()[:8])
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
    return f"[{model}] {words(prompt)} words: {head} #{digest}"


def prompt_text(system: Any, messages: list[Any]) -> str:
    """The request's text; of content parts only the text ones (an image's base64 is no
    words), so the answer and the token counts stay deterministic and small."""
    parts = [system if isinstance(system, str) else json.dumps(system)] if system else []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            parts += [t for t in texts if isinstance(t, str)]
        else:
            parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """At most ``limit`` words; True when cut (finish_reason length / max_tokens)."""
    pieces = text.split()
    return (" ".join(pieces[:limit]), True) if len(pieces) > limit else (text, False)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ProviderServer

    def log_message(self, fmt: str, *args: object) -> None:
        line = {"time": now_iso(), "service": "provider-standin", "msg": fmt % args}
        print(json.dumps(line), flush=True)

    # ------------------------------------------------------------ plumbing
    def send_json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def read_body(self) -> tuple[Any, str]:
        """(parsed JSON or None, raw text)."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            return json.loads(raw), raw
        except ValueError:
            return None, raw

    def auth_state(self, given: str | None) -> str:
        if not given:
            return "missing"
        return "ok" if given == self.server.state.key else "wrong"

    def shown_headers(self, auth: str) -> dict[str, str]:
        return {
            name.lower(): (auth if name.lower() in SECRET_HEADERS else value)
            for name, value in self.headers.items()
        }

    # ------------------------------------------------------------ routes
    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        if path == "/health":
            self.send_json(200, {"ok": True})
        elif path == "/_standin/requests":
            with self.server.state.lock:
                self.send_json(200, list(self.server.state.records))
        else:
            self.send_json(404, {"error": f"no route {path}"})

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        body, raw = self.read_body()
        state = self.server.state
        if path == "/_standin/answers":
            items = (body or {}).get("answers", [])
            with state.lock:
                state.answers += [i if isinstance(i, dict) else {"text": str(i)} for i in items]
            self.send_json(200, {"queued": len(state.answers)})
        elif path == "/_standin/mode":
            with state.lock:
                state.mode = dict(body or {"mode": "up"})
            self.send_json(200, state.mode)
        elif path == "/_standin/reset":
            state.reset()
            self.send_json(200, {"ok": True})
        elif path == "/v1/chat/completions":
            self.openai(body, raw)
        elif path == "/v1/messages":
            self.anthropic(body, raw)
        else:
            self.send_json(404, {"error": f"no route {path}"})

    def finish_call(self, api: str, auth: str, body: Any, raw: str, status: int) -> None:
        self.server.state.record(
            {
                "at": now_iso(),
                "api": api,
                "path": urlsplit(self.path).path,
                "auth": auth,
                "headers": self.shown_headers(auth),
                "body": body if body is not None else raw,
                "status": status,
            }
        )

    def wait(self, answer: dict[str, Any] | None) -> None:
        delay = float((answer or {}).get("delay_s") or 0)
        if delay:
            time.sleep(delay)

    # ------------------------------------------------------------ OpenAI
    def openai(self, body: Any, raw: str) -> None:
        given = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        auth = self.auth_state(given)
        status, answer, headers = self.openai_answer(body, auth, given)
        self.finish_call("openai", auth, body, raw, status)
        self.send_json(status, answer, {"x-request-id": new_id("req_"), **headers})

    def openai_answer(
        self, body: Any, auth: str, given: str
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        state = self.server.state
        mode = state.failing_mode()
        if mode and mode["mode"] == "down":
            message = "The engine is currently overloaded, please try again later"
            return mode.get("status", 503), openai_error(message, "server_error"), {}
        if auth == "missing":
            return 401, openai_error(OPENAI_NO_KEY, "invalid_request_error"), {}
        if auth == "wrong":
            message = openai_wrong_key(given)
            return 401, openai_error(message, "invalid_request_error", "invalid_api_key"), {}
        if mode and mode["mode"] == "rate_limited":
            wait = str(mode.get("retry_after", 1))
            message = "Rate limit reached for requests. Please try again later."
            headers = {"retry-after": wait, "x-ratelimit-remaining-requests": "0"}
            error = openai_error(message, "requests", "rate_limit_exceeded")
            return mode.get("status", 429), error, headers
        if not isinstance(body, dict):
            return 400, openai_error("We could not parse the JSON body of your request.",
                                     "invalid_request_error"), {}  # fmt: skip
        for name in ("model", "messages"):
            if name not in body:
                message = f"Missing required parameter: '{name}'."
                error = openai_error(
                    message, "invalid_request_error", "missing_required_parameter", name
                )
                return 400, error, {}
        model = body["model"]
        if model not in state.models:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return 404, openai_error(message, "invalid_request_error", "model_not_found"), {}
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            message = "Invalid 'messages': empty array. Expected an array with minimum length 1."
            return (
                400,
                openai_error(message, "invalid_request_error", "empty_array", "messages"),
                {},
            )
        try:  # images as upstream takes them (images.py names its sources)
            openai_check(messages)
        except Refused as refused:
            error = openai_error(refused.message, "invalid_request_error", refused.code,
                                 refused.param)  # fmt: skip
            return 400, error, {}
        text_in = prompt_text(None, messages)
        wants_json = (body.get("response_format") or {}).get("type") == "json_object"
        if wants_json and "json" not in text_in.lower():
            message = ("'messages' must contain the word 'json' in some form, to use "
                       "'response_format' of type 'json_object'.")  # fmt: skip
            return 400, openai_error(message, "invalid_request_error", None, "messages"), {}
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        answer = state.next_answer()
        self.wait(answer)
        text = answer["text"] if answer else default_answer(model, text_in)
        cut = False
        if isinstance(limit, int):
            text, cut = truncate(text, limit)
        return 200, openai_completion(model, text, words(text_in), "length" if cut else "stop"), {}

    # ------------------------------------------------------------ Anthropic
    def anthropic(self, body: Any, raw: str) -> None:
        # The key comes as x-api-key (the API reference, curl, older clients) or as
        # "Authorization: Bearer" (anthropic-sdk-python 2.x, _client.py _api_key_auth).
        bearer = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        given = self.headers.get("x-api-key") or bearer
        auth = self.auth_state(given)
        request_id = new_id("req_")
        status, answer, headers = self.anthropic_answer(body, auth, request_id)
        self.finish_call("anthropic", auth, body, raw, status)
        self.send_json(status, answer, {"request-id": request_id, **headers})

    def anthropic_answer(
        self, body: Any, auth: str, request_id: str
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        state = self.server.state

        def refuse(status: int, kind: str, message: str, headers: dict[str, str] | None = None):
            return status, anthropic_error(kind, message, request_id), headers or {}

        mode = state.failing_mode()
        if mode and mode["mode"] == "down":
            return refuse(mode.get("status", 529), "overloaded_error", "Overloaded")
        if auth == "missing":
            return refuse(401, "authentication_error", "x-api-key header is required")
        if auth == "wrong":
            return refuse(401, "authentication_error", "invalid x-api-key")
        if not VERSION.match(self.headers.get("anthropic-version") or ""):
            return refuse(400, "invalid_request_error", "anthropic-version: header is required")
        if mode and mode["mode"] == "rate_limited":
            message = ("This request would exceed your organization's rate limit of requests "
                       "per minute. Please try again later.")  # fmt: skip
            headers = {"retry-after": str(mode.get("retry_after", 1))}
            return refuse(mode.get("status", 429), "rate_limit_error", message, headers)
        if not isinstance(body, dict):
            return refuse(400, "invalid_request_error", "There was an issue with the JSON body")
        for name in ("model", "messages", "max_tokens"):
            if name not in body:
                return refuse(400, "invalid_request_error", f"{name}: Field required")
        messages = body["messages"]
        for index, message in enumerate(messages if isinstance(messages, list) else []):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ("user", "assistant"):
                return refuse(
                    400, "invalid_request_error",
                    f"messages.{index}.role: Input should be 'user' or 'assistant'",
                )  # fmt: skip
        if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
            return refuse(400, "invalid_request_error", "max_tokens: Input should be >= 1")
        try:  # images as upstream takes them (images.py names its sources)
            anthropic_check(messages)
        except Refused as refused:
            return refuse(400, "invalid_request_error", refused.message)
        model = body["model"]
        if model not in state.models:
            return refuse(404, "not_found_error", f"model: {model}")
        text_in = prompt_text(body.get("system"), messages)
        answer = state.next_answer()
        self.wait(answer)
        text = answer["text"] if answer else default_answer(model, text_in)
        text, cut = truncate(text, body["max_tokens"])
        stop = "max_tokens" if cut else "end_turn"
        return 200, anthropic_message(model, text, words(text_in), stop), {}


class ProviderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: State) -> None:
        super().__init__(address, Handler)
        self.state = state

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that went away (a healthcheck killed at its timeout, a pooled connection reset)
        # gets no traceback: a provider's client going away is not a server error (Go's net/http and
        # aiohttp both drop it quietly).
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8071)
    parser.add_argument("--root", type=Path, default=Path("."))
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    key = os.environ.get("STANDIN_PROVIDER_KEY") or DEFAULT_KEY
    models = os.environ.get("STANDIN_PROVIDER_MODELS") or DEFAULT_MODELS
    state = State(
        key, {m.strip() for m in models.split(",") if m.strip()}, args.root / "requests.jsonl"
    )
    server = ProviderServer((args.host, args.port), state)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(json.dumps({"time": now_iso(), "msg": f"provider stand-in on {args.host}:{args.port}"}),
          flush=True)  # fmt: skip
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
