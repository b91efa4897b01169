"""ComfyUI stand-in for tests: ComfyUI's HTTP API over a real models/ and output/ tree.

Run: python server.py [--listen [HOST]] [--port N] [--root COMFYUI_DIR] [--cpu]
The root (default STANDIN_COMFYUI_ROOT or /root/ComfyUI, as in yanwk/comfyui-boot) holds
models/<folder>/ and output/. Every route also answers under /api/. A worker thread
"runs" each queued graph after STANDIN_EXEC_SECONDS and writes a real PNG per SaveImage.
Knobs: STANDIN_EXEC_SECONDS, STANDIN_DEVICE_TYPE, STANDIN_FAIL_EXECUTION.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mimetypes
import os
import signal
import sys
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from nodes import object_info, validate_prompt
from worker import PromptQueue

MODEL_FOLDERS = {
    # folder name -> directories under models/ (legacy names included, as folder_paths.py)
    "checkpoints": ["checkpoints"],
    "loras": ["loras"],
    "vae": ["vae"],
    "text_encoders": ["text_encoders", "clip"],
    "diffusion_models": ["diffusion_models", "unet"],
    "clip_vision": ["clip_vision"],
    "controlnet": ["controlnet"],
    "embeddings": ["embeddings"],
    "upscale_models": ["upscale_models"],
    "vae_approx": ["vae_approx"],
    "style_models": ["style_models"],
    "hypernetworks": ["hypernetworks"],
    "photomaker": ["photomaker"],
    "gligen": ["gligen"],
    "diffusers": ["diffusers"],
}
MODEL_EXTENSIONS = {".ckpt", ".pt", ".pt2", ".bin", ".pth", ".safetensors", ".pkl", ".sft"}
INDEX_HTML = b"<!DOCTYPE html><html><head><title>ComfyUI</title></head><body></body></html>"


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ComfyServer

    def log_message(self, fmt: str, *args: object) -> None:
        line = {"time": now_iso(), "service": "comfyui-standin", "msg": fmt % args}
        print(json.dumps(line), flush=True)

    def send_body(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, body: object) -> None:
        self.send_body(status, json.dumps(body).encode(), "application/json; charset=utf-8")

    def read_json(self) -> object:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return None

    def route(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        path = parts.path[4:] if parts.path.startswith("/api/") else parts.path
        return path, parse_qs(parts.query)

    def do_GET(self) -> None:  # noqa: N802
        path, query = self.route()
        simple = {
            "/": lambda: self.send_body(200, INDEX_HTML, "text/html"),
            "/system_stats": self.system_stats,
            "/models": lambda: self.send_json(200, list(MODEL_FOLDERS)),
            "/object_info": lambda: self.send_json(200, object_info(self.list_models)),
            "/queue": lambda: self.send_json(200, self.server.queue.snapshot()),
            "/history": lambda: self.send_json(200, self.server.queue.history()),
            "/view": lambda: self.view(query),
        }
        if path in simple:
            simple[path]()
        elif path.startswith("/models/") and path[8:] in MODEL_FOLDERS:
            self.send_json(200, self.list_models(path[8:]))
        elif path.startswith("/history/"):
            self.send_json(200, self.server.queue.history(path[9:]))
        else:
            self.send_body(404, b"404: Not Found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        path, _ = self.route()
        body = self.read_json()
        queue = self.server.queue
        if path == "/prompt":
            self.post_prompt(body)
        elif path == "/interrupt":
            queue.interrupt()
            self.send_body(200, b"", "text/plain")
        elif path == "/free":
            queue.free_requests.append(body)
            self.send_body(200, b"", "text/plain")
        elif path == "/queue":
            queue.edit(body if isinstance(body, dict) else {})
            self.send_body(200, b"", "text/plain")
        else:
            self.send_body(404, b"404: Not Found", "text/plain")

    def list_models(self, folder: str) -> list[str]:
        """Model files of a folder, relative paths, as GET /models/<folder> lists them."""
        found: set[str] = set()
        for sub in MODEL_FOLDERS.get(folder, []):
            base = self.server.root / "models" / sub
            for path in base.rglob("*") if base.is_dir() else []:
                if path.is_file() and path.suffix.lower() in MODEL_EXTENSIONS:
                    found.add(path.relative_to(base).as_posix())
        return sorted(found)

    def system_stats(self) -> None:
        ram_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        ram_free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        device_type = os.environ.get("STANDIN_DEVICE_TYPE", "cpu")
        device = {
            "name": device_type,
            "type": device_type,
            "index": None if device_type == "cpu" else 0,
            "vram_total": ram_total,
            "vram_free": ram_free,
            "torch_vram_total": ram_total,
            "torch_vram_free": ram_free,
        }
        system = {
            "os": os.name,
            "ram_total": ram_total,
            "ram_free": ram_free,
            "comfyui_version": "0.3.60",
            "python_version": sys.version,
            "pytorch_version": "stand-in",
            "embedded_python": False,
            "argv": sys.argv,
        }
        self.send_json(200, {"system": system, "devices": [device]})

    def post_prompt(self, body: object) -> None:
        prompt = body.get("prompt") if isinstance(body, dict) else None
        error, outputs, node_errors = validate_prompt(prompt, self.list_models)
        if error is not None:
            self.send_json(400, {"error": error, "node_errors": node_errors})
            return
        assert isinstance(body, dict)
        extra = {"client_id": body.get("client_id"), **(body.get("extra_data") or {})}
        prompt_id, number = self.server.queue.put(prompt, extra, outputs, body.get("prompt_id"))
        self.send_json(200, {"prompt_id": prompt_id, "number": number, "node_errors": node_errors})

    def view(self, query: dict[str, list[str]]) -> None:
        kind = query.get("type", ["output"])[0]
        if kind not in ("output", "input", "temp"):
            self.send_body(400, b"invalid type", "text/plain")
            return
        base = (self.server.root / kind).resolve()
        filename = query.get("filename", [""])[0]
        path = (base / query.get("subfolder", [""])[0] / filename).resolve()
        if not filename or base not in path.parents:
            self.send_body(403 if filename else 400, b"forbidden", "text/plain")
        elif not path.is_file():
            self.send_body(404, b"404: Not Found", "text/plain")
        else:
            content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            self.send_body(200, path.read_bytes(), content_type)


class ComfyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path):
        super().__init__(address, Handler)
        self.root = root
        seconds = float(os.environ.get("STANDIN_EXEC_SECONDS", "0.3"))
        self.queue = PromptQueue(root / "output", seconds)


def mark_as_comfyui_checkout(root: Path) -> None:
    """The real image's /root/ComfyUI is a git clone of ComfyUI, and comfy-cli accepts a
    --workspace only when its git remote is ComfyUI's. A minimal .git (the files GitPython
    needs: HEAD, config, objects/, refs/) gives the stand-in the same property."""
    git = root / ".git"
    if git.exists():
        return
    (git / "objects").mkdir(parents=True)
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/master\n")
    (git / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        '[remote "origin"]\n\turl = https://github.com/comfyanonymous/ComfyUI.git\n'
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ComfyUI stand-in for tests")
    parser.add_argument("--listen", nargs="?", const="0.0.0.0", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8188)
    default_root = os.environ.get("STANDIN_COMFYUI_ROOT", "/root/ComfyUI")
    parser.add_argument("--root", type=Path, default=Path(default_root))
    args, _ignored = parser.parse_known_args(argv)  # --cpu and other ComfyUI flags
    # The folders ComfyUI creates at start, so volume mounts and listings find them.
    for folder in ("output", "input", "temp"):
        (args.root / folder).mkdir(parents=True, exist_ok=True)
    for folder in (d for dirs in MODEL_FOLDERS.values() for d in dirs):
        (args.root / "models" / folder).mkdir(parents=True, exist_ok=True)
    mark_as_comfyui_checkout(args.root)
    server = ComfyServer((args.listen, args.port), args.root)
    server.queue.start()
    line = {
        "time": now_iso(),
        "service": "comfyui-standin",
        "msg": f"To see the GUI go to: http://{args.listen}:{args.port}",
    }
    print(json.dumps(line), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
