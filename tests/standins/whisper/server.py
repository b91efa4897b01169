"""Whisper (speaches) stand-in for tests: speaches' model and transcription API over a
real Hugging Face hub-cache layout.

Run: python server.py [--host H] [--port N] [--root HF_HUB_CACHE]
Cache dir: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
POST /v1/models/{id} answers 200 when it downloaded, 201 when the model was there
(speaches' routers/models.py); transcription of a model not on disk is a 404.
Knobs: STANDIN_UNKNOWN_MODELS, STANDIN_MODEL_BYTES (model.bin size, default 1 MiB).
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import email.policy
import hashlib
import io
import json
import os
import shutil
import signal
import sys
import wave
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

TASK = "automatic-speech-recognition"
# The files faster-whisper needs plus the model card speaches filters on.
MODEL_CARD = "---\nlibrary_name: ctranslate2\nlanguage:\n- en\ntags:\n- audio\n- {task}\n---\n"
NOT_INSTALLED = (
    "Model '{model}' is not installed locally. You can download the model using `POST /v1/models`"
)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def model_files(model_id: str) -> dict[str, bytes]:
    """Deterministic repository contents for `model_id`."""
    size = int(os.environ.get("STANDIN_MODEL_BYTES", str(1024 * 1024)))
    return {
        "README.md": MODEL_CARD.format(task=TASK).encode(),
        "config.json": json.dumps({"model_id": model_id, "num_mel_bins": 80}).encode(),
        "preprocessor_config.json": json.dumps({"feature_size": 80}).encode(),
        "tokenizer.json": json.dumps({"version": "1.0", "model": model_id}).encode(),
        "vocabulary.txt": b"\n".join(f"token{i}".encode() for i in range(64)),
        "model.bin": hashlib.shake_256(f"{model_id}:model.bin".encode()).digest(size),
    }


class HubCache:
    """The hub cache layout: models--org--name/{blobs,snapshots/<rev>,refs/main}."""

    def __init__(self, root: Path):
        self.root = root

    def repo_dir(self, model_id: str) -> Path:
        return self.root / ("models--" + model_id.replace("/", "--"))

    def snapshot(self, model_id: str) -> Path | None:
        """The complete snapshot of a model, or None."""
        repo = self.repo_dir(model_id)
        try:
            revision = (repo / "refs" / "main").read_text().strip()
        except OSError:
            return None
        snap = repo / "snapshots" / revision
        complete = all((snap / name).is_file() for name in model_files(model_id))
        return snap if complete else None

    def download(self, model_id: str) -> bool:
        """Write the repository; False when it was already complete (speaches' 201)."""
        if self.snapshot(model_id) is not None:
            return False
        repo = self.repo_dir(model_id)
        revision = hashlib.sha1(model_id.encode()).hexdigest()
        snap = repo / "snapshots" / revision
        (repo / "blobs").mkdir(parents=True, exist_ok=True)
        snap.mkdir(parents=True, exist_ok=True)
        for name, data in model_files(model_id).items():
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            incomplete = blob.with_name(blob.name + ".incomplete")  # as huggingface_hub
            incomplete.write_bytes(data)
            os.replace(incomplete, blob)
            link = snap / name
            link.unlink(missing_ok=True)
            link.symlink_to(Path("..", "..", "blobs", blob.name))
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
        return True

    def local_models(self) -> list[dict]:
        models = []
        for repo in sorted(self.root.glob("models--*--*")):
            model_id = repo.name[len("models--") :].replace("--", "/", 1)
            snap = self.snapshot(model_id)
            if snap is None or "ctranslate2" not in (snap / "README.md").read_text():
                continue
            models.append(
                {
                    "id": model_id,
                    "created": int(repo.stat().st_mtime),
                    "object": "model",
                    "owned_by": model_id.split("/")[0],
                    "language": ["en"],
                    "task": TASK,
                }
            )
        return models


def is_known(model_id: str) -> bool:
    unknown = {s.strip() for s in os.environ.get("STANDIN_UNKNOWN_MODELS", "").split(",")}
    org, _, name = model_id.partition("/")
    return bool(org and name) and not name.startswith("nonexistent") and model_id not in unknown


def audio_facts(data: bytes) -> tuple[float, str]:
    """(duration in seconds, description) of an upload; WAV is read, other formats are
    estimated as 16 kHz 16-bit mono."""
    try:
        with wave.open(io.BytesIO(data)) as wav:
            return wav.getnframes() / wav.getframerate(), "wav"
    except (wave.Error, EOFError):
        return len(data) / 32000, "audio"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: WhisperServer

    def log_message(self, fmt: str, *args: object) -> None:
        line = {"time": now_iso(), "service": "whisper-standin", "msg": fmt % args}
        print(json.dumps(line), flush=True)

    def send_body(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, body: object) -> None:
        self.send_body(status, json.dumps(body).encode(), "application/json")

    def send_text(self, status: int, text: str) -> None:
        self.send_body(status, text.encode(), "text/plain; charset=utf-8")

    def body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def model_id(self) -> str:
        return unquote(urlsplit(self.path).path[len("/v1/models/") :])

    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        cache = self.server.cache
        if path == "/health":
            self.send_text(200, "OK")
        elif path == "/v1/models":
            self.send_json(200, {"data": cache.local_models(), "object": "list"})
        elif path.startswith("/v1/models/"):
            found = [m for m in cache.local_models() if m["id"] == self.model_id()]
            if found:
                self.send_json(200, found[0])
            else:
                self.send_json(404, {"detail": f"Model '{self.model_id()}' not found"})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        data = self.body()
        if path.startswith("/v1/models/"):
            self.download(self.model_id())
        elif path == "/v1/audio/transcriptions":
            self.transcribe(data)
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_DELETE(self) -> None:  # noqa: N802
        model_id = self.model_id()
        repo = self.server.cache.repo_dir(model_id)
        if not urlsplit(self.path).path.startswith("/v1/models/") or not repo.is_dir():
            self.send_json(404, {"detail": f"Model '{model_id}' not found"})
            return
        shutil.rmtree(repo)
        self.send_json(200, {"detail": f"Model '{model_id}' deleted"})

    def download(self, model_id: str) -> None:
        if not is_known(model_id):
            self.send_json(404, {"detail": f"Model '{model_id}' not found"})
        elif self.server.cache.download(model_id):
            self.send_text(200, f"Model '{model_id}' downloaded")
        else:
            self.send_text(201, f"Model '{model_id}' already exists")

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
        fields = self.form(data)
        missing = [name for name in ("file", "model") if name not in fields]
        if missing:
            detail = [
                {"type": "missing", "loc": ["body", name], "msg": "Field required"}
                for name in missing
            ]
            self.send_json(422, {"detail": detail})
            return
        model = fields["model"].decode()
        if self.server.cache.snapshot(model) is None:
            self.send_json(404, {"detail": NOT_INSTALLED.format(model=model)})
            return
        if not fields["file"]:
            self.send_json(500, {"detail": "Failed to decode audio."})
            return
        self.reply(fields)

    def reply(self, fields: dict[str, bytes]) -> None:
        duration, kind = audio_facts(fields["file"])
        language = fields.get("language", b"en").decode() or "en"
        size = len(fields["file"])
        text = f"Stand-in transcript of {duration:.2f} seconds of {kind} ({size} bytes)."
        response_format = fields.get("response_format", b"json").decode()
        if response_format == "text":
            self.send_text(200, text)
        elif response_format == "json":
            self.send_json(200, {"text": text})
        elif response_format == "verbose_json":
            segment = {
                "id": 0,
                "seek": 0,
                "start": 0.0,
                "end": round(duration, 3),
                "text": text,
                "tokens": [len(text)],
                "temperature": 0.0,
                "avg_logprob": -0.1,
                "compression_ratio": 1.0,
                "no_speech_prob": 0.01,
                "words": None,
            }
            self.send_json(
                200,
                {
                    "task": "transcribe",
                    "language": language,
                    "duration": duration,
                    "text": text,
                    "words": None,
                    "segments": [segment],
                },
            )
        else:
            detail = [
                {
                    "type": "enum",
                    "loc": ["body", "response_format"],
                    "msg": "Input should be 'text', 'json' or 'verbose_json'",
                }
            ]
            self.send_json(422, {"detail": detail})


class WhisperServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path):
        super().__init__(address, Handler)
        self.cache = HubCache(root)


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
