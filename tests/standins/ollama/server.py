"""Ollama stand-in for tests: the HTTP API the kit uses, on the real on-disk store.

Run: python server.py [--host H] [--port N] [--root MODELS_DIR]
Defaults follow Ollama: OLLAMA_HOST (127.0.0.1:11434), OLLAMA_MODELS (~/.ollama/models).
Knobs: STANDIN_MODEL_BYTES, STANDIN_REGISTRY_MODELS, STANDIN_UNKNOWN_MODELS,
STANDIN_FAIL_MIDSTREAM, STANDIN_LOAD_SECONDS, STANDIN_TOKENS_PER_SECOND,
STANDIN_VRAM_FRACTION, STANDIN_PULL_CHUNK_SECONDS, STANDIN_OLLAMA_VERSION, STANDIN_SCRIPT
(README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from names import (
    INVALID_MODEL_NAME,
    MODEL_REQUIRED,
    ConflictingSource,
    ModelName,
    ModelRequired,
    NameError_,
    parse_ref,
    pull_name,
)
from runtime import LoadedModel, Runtime, embedding, eval_metrics, parse_keep_alive, reply_words
from script import Script, format_error
from store import (
    ModelStore,
    PullError,
    capabilities,
    is_embedding_model,
    is_vision_model,
    stream_pull,
)
from structured import shaped
from vision import ImageError, decode_all, describe

VERSION = os.environ.get("STANDIN_OLLAMA_VERSION", "0.20.6")


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def parse_host(value: str) -> tuple[str, int]:
    """OLLAMA_HOST as upstream reads it: [scheme://]host[:port], default port 11434."""
    netloc = urlsplit(value if "://" in value else f"http://{value}")
    return netloc.hostname or "127.0.0.1", netloc.port or 11434


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: OllamaServer

    def log_message(self, fmt: str, *args: object) -> None:
        # One JSON object per line, as the kit's services log.
        print(
            json.dumps({"time": now_iso(), "service": "ollama-standin", "msg": fmt % args}),
            flush=True,
        )

    def send_json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def stream_ndjson(self, lines: Iterable[dict]) -> None:
        """Chunked application/x-ndjson, one JSON object per line, as upstream streams."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            data = json.dumps(line).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def read_json(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            raise ApiError(400, "missing request body")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        if not isinstance(body, dict):
            raise ApiError(400, "invalid request body")
        return body

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_text(200, "Ollama is running")

    def do_GET(self) -> None:  # noqa: N802
        routes = {
            "/": self.root,
            "/api/version": self.version,
            "/api/tags": self.tags,
            "/api/ps": self.ps,
        }
        self.dispatch(routes)

    def do_POST(self) -> None:  # noqa: N802
        routes = {
            "/api/pull": self.pull,
            "/api/show": self.show,
            "/api/generate": self.generate,
            "/api/chat": self.chat,
            "/api/embed": self.embed,
            "/api/embeddings": self.embeddings,
        }
        self.dispatch(routes)

    def dispatch(self, routes: dict) -> None:
        handler = routes.get(urlsplit(self.path).path)
        try:
            if handler is None:
                raise ApiError(404, "404 page not found")
            handler()
        except ApiError as exc:
            self.send_json(exc.status, {"error": str(exc)})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away: upstream cancels too

    # ------------------------------------------------------------------ simple reads
    def root(self) -> None:
        self.send_text(200, "Ollama is running")

    def version(self) -> None:
        self.send_json(200, {"version": VERSION})

    def tags(self) -> None:
        store = self.server.store
        models = []
        for name, path in store.list_models():
            manifest = store.read_manifest(name)
            if manifest is None:
                continue
            models.append(
                {
                    "name": name.display,
                    "model": name.display,
                    "modified_at": datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(),
                    "size": sum(layer["size"] for layer in manifest["layers"]),
                    "digest": hashlib.sha256(path.read_bytes()).hexdigest(),
                    "details": self.details(manifest),
                }
            )
        self.send_json(200, {"models": models})

    def details(self, manifest: dict) -> dict:
        config = self.server.store.config_of(manifest)
        return {
            "parent_model": "",
            "format": config.get("model_format", "gguf"),
            "family": config.get("model_family", ""),
            "families": config.get("model_families"),
            "parameter_size": config.get("model_type", ""),
            "quantization_level": config.get("file_type", ""),
        }

    def ps(self) -> None:
        fraction = float(os.environ.get("STANDIN_VRAM_FRACTION", "0"))
        models = [
            {
                "name": m.name,
                "model": m.name,
                "size": m.size,
                "digest": m.digest,
                "details": m.details,
                "expires_at": m.expires_at.isoformat(),
                "size_vram": int(m.size * fraction),
                "context_length": 8192,
            }
            for m in self.server.runtime.running()
        ]
        self.send_json(200, {"models": models})

    def model_of(self, body: dict, empty: ApiError | None = None) -> tuple[ModelName, dict]:
        """The model's name and manifest, refused as server/routes.go GenerateHandler /
        EmbedHandler / ChatHandler do (parseAndValidateModelRef, writeModelRefParseError):
        a bad name 400 "invalid model name", absent 404 "model '<given>' not found"; an
        empty name 404 too, or `empty` (ChatHandler, EmbeddingsHandler: 400)."""
        given = str(body.get("model") or "")
        not_found = ApiError(404, f"model '{given}' not found")
        try:
            name, _source = parse_ref(given)
        except ModelRequired as exc:
            raise (empty or not_found) from exc
        except NameError_ as exc:
            raise ApiError(400, str(exc)) from exc
        manifest = self.server.store.read_manifest(name)
        if manifest is None:
            raise not_found
        return name, manifest

    def show(self) -> None:
        """server/routes.go ShowHandler: `model` or else `name`; neither is 400 "model is
        required"; a bad name 400; absent 404 "model '<base>' not found"."""
        body = self.read_json()
        given = str(body.get("model") or body.get("name") or "")
        if not given:
            raise ApiError(400, MODEL_REQUIRED)
        try:
            name, _source = parse_ref(given)
        except NameError_ as exc:
            raise ApiError(400, str(exc)) from exc
        manifest = self.server.store.read_manifest(name)
        if manifest is None:
            raise ApiError(404, f"model '{given.strip()}' not found")
        details = self.details(manifest)
        self.send_json(
            200,
            {
                "license": "",
                "modelfile": f"FROM {name.display}\n",
                "parameters": "",
                "template": "{{ .System }}\n{{ .Prompt }}",
                "details": details,
                "model_info": {"general.architecture": details["family"]},
                # server/routes.go GetModelInfo: m.Capabilities() (server/images.go)
                "capabilities": capabilities(name),
                "modified_at": now_iso(),
            },
        )

    # ------------------------------------------------------------------ pull
    def pull(self) -> None:
        body = self.read_json()
        # server/routes.go PullHandler: parseNormalizePullModelRef, then
        # writeModelRefParseError with fallback 400 "invalid model name" (an empty name too).
        try:
            name = pull_name(str(body.get("model") or body.get("name") or ""))
        except ConflictingSource as exc:
            raise ApiError(400, str(exc)) from exc
        except NameError_ as exc:
            raise ApiError(400, INVALID_MODEL_NAME) from exc
        lines: list[dict] = []
        if body.get("stream", True) is False:
            # Upstream's waitForStream: the last progress line, or the error as a 500.
            try:
                self.server.store.pull(name, lines.append)
            except PullError as exc:
                raise ApiError(500, str(exc)) from exc
            self.send_json(200, lines[-1])
            return
        self.stream_ndjson(stream_pull(self.server.store, name))

    # ------------------------------------------------------------------ inference
    def prepare(self, body: dict, empty: ApiError | None = None) -> tuple[LoadedModel, float, bool]:
        """Find and load the model; returns it, the load seconds and whether the request
        asked to unload it afterwards (keep_alive 0)."""
        name, manifest = self.model_of(body, empty)
        try:
            keep_alive = parse_keep_alive(body.get("keep_alive"))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        size = sum(layer["size"] for layer in manifest["layers"])
        digest = hashlib.sha256(self.server.store.manifest_path(name).read_bytes()).hexdigest()
        model = LoadedModel(name.display, size, digest, self.details(manifest), datetime.now(UTC))
        if keep_alive.total_seconds() == 0:
            return model, 0.0, True
        return model, self.server.runtime.ensure_loaded(model, keep_alive), False

    def generate(self) -> None:
        body = self.read_json()
        images = self.images_of([body.get("images")])
        prompt = str(body.get("prompt") or "")
        self.infer(body, prompt, lambda text: {"response": text}, "response", images)

    def chat(self) -> None:
        body = self.read_json()
        messages = body.get("messages") or []
        images = self.images_of([m.get("images") for m in messages if isinstance(m, dict)])
        user = [m.get("content", "") for m in messages if isinstance(m, dict)]
        prompt = str(user[-1]) if user else ""
        self.infer(
            body,
            prompt if messages else "",
            lambda text: {"message": {"role": "assistant", "content": text}},
            "message",
            images,
        )

    @staticmethod
    def images_of(fields: list) -> list[bytes]:
        """Every image of the request, decoded as binding the body does (vision.py)."""
        try:
            return [image for field in fields for image in decode_all(field)]
        except ImageError as exc:
            raise ApiError(exc.status, str(exc)) from exc

    def infer(self, body: dict, prompt: str, content, kind: str, images: list[bytes]) -> None:
        """generate and chat share everything but the shape of the content field."""
        required = ApiError(400, MODEL_REQUIRED) if kind == "message" else None
        model, load_seconds, unload = self.prepare(body, required)
        refused = format_error(body.get("format"))
        if refused:
            raise ApiError(500, refused)
        base = {"model": body.get("model"), "created_at": now_iso()}
        if not prompt and unload:
            # Empty prompt with keep_alive 0 unloads any model, an embedding model too:
            # server/routes.go GenerateHandler expires the runner (`req.Prompt == "" &&
            # req.KeepAlive.Duration == 0` -> s.sched.expireRunner) before it asks
            # scheduleRunner for the completion capability.
            self.server.runtime.unload(model.name)
            self.send_json(200, {**base, **content(""), "done": True, "done_reason": "unload"})
            return
        if kind == "response" and is_embedding_model(ModelName.parse(model.name)):
            # ...which is where anything else sent to an embedding model stops
            # (errCapabilityCompletion -> 400 "%q does not support generate").
            raise ApiError(400, f'"{body.get("model")}" does not support generate')
        if not prompt:
            # Empty prompt: preload (upstream's done_reason "load").
            self.send_json(200, {**base, **content(""), "done": True, "done_reason": "load"})
            return
        if unload:
            load_seconds = self.server.runtime.ensure_loaded(model, parse_keep_alive("1m"))
        limit = (body.get("options") or {}).get("num_predict")
        words = reply_words(model.name, prompt, limit)
        if images and is_vision_model(ModelName.parse(model.name)):
            # A text model leaves the images unused (vision.py); a vision model "sees" them.
            try:
                words = [words[0], *describe(images), *words[1:]]
            except ImageError as exc:
                raise ApiError(exc.status, str(exc)) from exc
        scripted = self.server.script.next_answer(body)
        if scripted is None:
            scripted = shaped(body.get("format"), words)  # JSON, as a format makes it
        if scripted is not None:
            # The canned text, cut into pieces that keep its spaces: joined, they are it.
            words = [scripted[i : i + 16] for i in range(0, len(scripted), 16)] or [""]
            final = {**base, "done": True, "done_reason": "stop",
                     **eval_metrics(prompt, words, load_seconds)}  # fmt: skip
            if body.get("stream", True) is False:
                self.send_json(200, {**final, **content(scripted)})
                return
            chunks = [{**base, **content(piece), "done": False} for piece in words]
            self.stream_ndjson([*chunks, {**final, **content("")}])
            return
        final = {
            **base,
            "done": True,
            "done_reason": "stop",
            **eval_metrics(prompt, words, load_seconds),
        }
        if unload:
            self.server.runtime.unload(model.name)
        if body.get("stream", True) is False:
            self.send_json(200, {**final, **content(" ".join(words))})
            return
        parts = [f"{w} " if i < len(words) - 1 else w for i, w in enumerate(words)]
        chunks = [{**base, **content(p), "done": False} for p in parts]
        self.stream_ndjson([*chunks, {**final, **content("")}])

    def embed(self) -> None:
        body = self.read_json()
        model, load_seconds, unload = self.prepare(body)
        if unload:
            load_seconds = self.server.runtime.ensure_loaded(model, parse_keep_alive("1m"))
            self.server.runtime.unload(model.name)
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        vectors = [embedding(model.name, str(text)) for text in texts]
        self.send_json(
            200,
            {
                "model": body.get("model"),
                "embeddings": vectors,
                "total_duration": int(load_seconds * 1e9) + 1000,
                "load_duration": int(load_seconds * 1e9),
                "prompt_eval_count": sum(len(str(t).split()) for t in texts),
            },
        )

    def embeddings(self) -> None:
        """The legacy single-prompt endpoint."""
        body = self.read_json()
        model, _, _ = self.prepare(body, ApiError(400, MODEL_REQUIRED))
        self.send_json(200, {"embedding": embedding(model.name, str(body.get("prompt", "")))})


DEFAULT_SCRIPT = "/tmp/airig-standin-script.json"


class OllamaServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], models: Path):
        super().__init__(address, Handler)
        model_bytes = int(os.environ.get("STANDIN_MODEL_BYTES", str(2 * 1024 * 1024)))
        self.store = ModelStore(models, model_bytes)
        self.runtime = Runtime()
        # Without STANDIN_SCRIPT the default file is read when it exists (an e2e test
        # copies it into the running container); absent, the deterministic replies stay.
        self.script = Script(Path(os.environ.get("STANDIN_SCRIPT") or DEFAULT_SCRIPT))

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that went away (a healthcheck killed at its timeout, a pooled connection reset)
        # gets no traceback: Go's net/http logs nothing when a client resets or closes a kept-alive
        # connection (net/http/server.go, conn.serve: io.EOF and isCommonNetReadError return
        # quietly).
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def default_models_dir() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


def main(argv: list[str] | None = None) -> None:
    host, port = parse_host(os.environ.get("OLLAMA_HOST", "127.0.0.1:11434"))
    parser = argparse.ArgumentParser(description="Ollama stand-in for tests")
    parser.add_argument("--host", default=host)
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument(
        "--root", type=Path, default=default_models_dir(), help="models directory (OLLAMA_MODELS)"
    )
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    server = OllamaServer((args.host, args.port), args.root)
    print(
        json.dumps(
            {
                "time": now_iso(),
                "service": "ollama-standin",
                "msg": f"Listening on {args.host}:{args.port} (version {VERSION})",
            }
        ),
        flush=True,
    )
    # PID 1 in a container gets no default SIGTERM action: exit cleanly on `docker stop`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
