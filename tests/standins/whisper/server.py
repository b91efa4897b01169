"""Whisper (speaches) stand-in for tests: speaches' model, memory and transcription API over
a real Hugging Face hub-cache layout, refusing what speaches v0.8.3 refuses.

Run: python server.py [--host H] [--port N] [--root HF_HUB_CACHE]
Cache dir: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
Routes (speaches v0.8.3 src/speaches/routers/):
  models.py  GET /v1/models, GET|POST|DELETE /v1/models/{id}   (hub.py)
  misc.py    GET /health, GET /api/ps, POST|DELETE /api/ps/{id}  (models.py)
  stt.py     POST /v1/audio/transcriptions                      (audio.py)
Knobs: STANDIN_REGISTRY_MODELS, STANDIN_UNKNOWN_MODELS, STANDIN_MODEL_BYTES (model.bin
size, default 1 MiB), STANDIN_LOAD_SECONDS, STANDIN_TRANSCRIBE_SECONDS, WHISPER__TTL.
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import email.policy
import json
import os
import shutil
import signal
import sys
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from audio import NOT_SUPPORTED, RESPONSE_FORMATS, Undecodable, decode, render
from hub import HubCache, in_registry
from models import LoadError, ModelManager

NOT_INSTALLED = (
    "Model '{model}' is not installed locally. You can download the model using `POST /v1/models`"
)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: WhisperServer

    def log_message(self, fmt: str, *args: object) -> None:
        line = {"time": now_iso(), "service": "whisper-standin", "msg": fmt % args}
        print(json.dumps(line), flush=True)

    def send_body(self, status: int, data: bytes, content_type: str | None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, body: object) -> None:
        self.send_body(status, json.dumps(body).encode(), "application/json")

    def send_text(self, status: int, text: str) -> None:
        # starlette Response(content=str) without media_type: no Content-Type header
        self.send_body(status, text.encode(), None)

    def body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def path_id(self, prefix: str) -> str:
        """The `{model_id:path}` parameter after `prefix`, percent-decoded."""
        return unquote(urlsplit(self.path).path[len(prefix) :])

    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        cache = self.server.cache
        if path == "/health":
            # misc.py health(): Response(status_code=200, content="OK"), plain text, not JSON
            self.send_text(200, "OK")
        elif path == "/api/ps":
            self.send_json(200, {"models": list(self.server.models.loaded)})
        elif path == "/v1/models":
            self.send_json(200, {"data": cache.local_models(), "object": "list"})
        elif path.startswith("/v1/models/"):
            model_id = self.path_id("/v1/models/")
            found = [m for m in cache.local_models() if m["id"] == model_id]
            if found:
                self.send_json(200, found[0])
            else:
                self.send_json(404, {"detail": f"Model '{model_id}' not found"})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        data = self.body()
        if path.startswith("/v1/models/"):
            self.download(self.path_id("/v1/models/"))
        elif path.startswith("/api/ps/"):
            self.load(self.path_id("/api/ps/"))
        elif path == "/v1/audio/transcriptions":
            self.transcribe(data)
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_DELETE(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        if path.startswith("/api/ps/"):
            self.unload(self.path_id("/api/ps/"))
        elif path.startswith("/v1/models/"):
            self.delete(self.path_id("/v1/models/"))
        else:
            self.send_json(404, {"detail": "Not Found"})

    # ------------------------------------------------------------------ models.py
    def download(self, model_id: str) -> None:
        """routers/models.py download_remote_model: 404 unless a registry lists the id;
        200 when it downloaded, 201 when the files were already there."""
        if not in_registry(model_id):
            self.send_json(404, {"detail": f"Model '{model_id}' not found"})
        elif self.server.cache.download(model_id):
            self.send_text(200, f"Model '{model_id}' downloaded")
        else:
            self.send_text(201, f"Model '{model_id}' already exists")

    def delete(self, model_id: str) -> None:
        """routers/models.py delete_model: hf_utils.delete_local_model_repo raises
        FileNotFoundError("Model repo not found: <id>"), answered 404."""
        repo = self.server.cache.repo_dir(model_id)
        if not repo.is_dir():
            self.send_json(404, {"detail": f"Model repo not found: {model_id}"})
            return
        shutil.rmtree(repo)
        self.send_json(200, {"detail": f"Model '{model_id}' deleted"})

    # ------------------------------------------------------------------ misc.py
    def load(self, model_id: str) -> None:
        """routers/misc.py load_model_route: 409 "Model already loaded" when registered
        (even after a failed load), else load: 201 with no body; a load that raises is
        an unhandled error (starlette's 500 "Internal Server Error")."""
        models = self.server.models
        if model_id in models.loaded:
            self.send_text(409, "Model already loaded")
            return
        try:
            with models.load_model(model_id):
                pass
        except LoadError:
            self.send_body(500, b"Internal Server Error", "text/plain; charset=utf-8")
            return
        self.send_body(201, b"", None)

    def unload(self, model_id: str) -> None:
        """routers/misc.py stop_running_model: 204; KeyError 404 "Model not found";
        ValueError 409 with its text."""
        try:
            self.server.models.unload_model(model_id)
        except KeyError:
            self.send_text(404, "Model not found")
        except ValueError as exc:
            self.send_text(409, str(exc))
        else:
            self.send_body(204, b"", None)

    # ------------------------------------------------------------------ stt.py
    def form(self, data: bytes) -> dict[str, bytes]:
        """multipart/form-data fields, parsed by the stdlib email parser."""
        header = f"Content-Type: {self.headers.get('Content-Type', '')}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(header + data)
        if not message.is_multipart():
            return {}
        fields = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if name:
                fields[str(name)] = part.get_payload(decode=True) or b""
        return fields

    def transcribe(self, data: bytes) -> None:
        """stt.py transcribe_file. FastAPI solves the audio dependency (decoding) before it
        validates the other form fields, so an undecodable file is 415 even when `model` is
        missing; then 422 for missing/invalid fields; then 404 for a model not on disk."""
        fields = self.form(data)
        duration, kind = 0.0, "audio"
        if "file" in fields:
            try:
                duration, kind = decode(fields["file"])
            except Undecodable:
                self.send_json(415, {"detail": NOT_SUPPORTED})
                return
        errors = [
            {"type": "missing", "loc": ["body", name], "msg": "Field required", "input": None}
            for name in ("file", "model")
            if name not in fields
        ]
        response_format = fields.get("response_format", b"json").decode()
        if response_format not in RESPONSE_FORMATS:
            expected = "'text', 'json', 'verbose_json', 'srt' or 'vtt'"
            errors.append(
                {
                    "type": "literal_error",
                    "loc": ["body", "response_format"],
                    "msg": f"Input should be {expected}",
                    "input": response_format,
                    "ctx": {"expected": expected},
                }
            )
        if errors:
            self.send_json(422, {"detail": errors})
            return
        model = fields["model"].decode()
        if self.server.cache.snapshot(model) is None:
            self.send_json(404, {"detail": NOT_INSTALLED.format(model=model)})
            return
        language = fields.get("language", b"en").decode() or "en"
        size = len(fields["file"])
        text = f"Stand-in transcript of {duration:.2f} seconds of {kind} ({size} bytes)."
        try:
            with self.server.models.load_model(model):
                time.sleep(float(os.environ.get("STANDIN_TRANSCRIBE_SECONDS", "0")))
                body, content_type = render(text, duration, language, response_format)
        except LoadError:
            self.send_body(500, b"Internal Server Error", "text/plain; charset=utf-8")
            return
        self.send_body(200, body.encode(), content_type)


class WhisperServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path):
        super().__init__(address, Handler)
        self.cache = HubCache(root)
        self.models = ModelManager(self.cache)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that went away (a healthcheck killed at its timeout, a pooled connection reset)
        # gets no traceback: uvicorn, speaches' server, drops a connection its client reset without
        # an error line (protocols/http/h11_impl.py, connection_lost).
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def default_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="speaches stand-in for tests")
    parser.add_argument("--host", default=os.environ.get("UVICORN_HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("UVICORN_PORT", "8000")))
    parser.add_argument("--root", type=Path, default=default_cache(), help="HF hub cache")
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    server = WhisperServer((args.host, args.port), args.root)
    line = {
        "time": now_iso(),
        "service": "whisper-standin",
        "msg": f"Uvicorn running on http://{args.host}:{args.port}",
    }
    print(json.dumps(line), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
