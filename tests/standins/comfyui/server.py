"""ComfyUI stand-in for tests: ComfyUI's HTTP API over a real models/ and output/ tree.

Run: python server.py [ComfyUI's flags: --listen [HOST] --port N --cpu ...] [--root DIR]
Starts as ComfyUI's main.py does: the flags are parsed strictly (cli_args.py, exit 2),
then the torch device is probed (devices.py: without --cpu, a build or machine with no
usable GPU ends the process with upstream's traceback, exit 1). The image runs it as
yanwk/comfyui-boot runs ComfyUI: `--listen --port 8188 ${CLI_ARGS}` (entrypoint.sh).
The root (--root, default STANDIN_COMFYUI_ROOT or /root/ComfyUI) holds models/<folder>/
and output/. Every route also answers under /api/. A worker thread "runs" each queued
graph after STANDIN_EXEC_SECONDS and writes a real PNG per SaveImage.
Knobs: STANDIN_TORCH_BUILD, STANDIN_GPU_COUNT, STANDIN_GPU_NAME, STANDIN_VRAM_BYTES,
STANDIN_EXEC_SECONDS, STANDIN_FAIL_EXECUTION.
"""

from __future__ import annotations

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

import cli_args
from comfyui_version import __version__
from devices import (
    TORCH_VERSIONS,
    Device,
    StartupError,
    torch_build,
    torch_devices,
    traceback_text,
)
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
        """server.py system_stats: one entry per torch device, the primary first."""
        ram_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        ram_free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        vram = int(os.environ.get("STANDIN_VRAM_BYTES", str(8 << 30)))
        devices = []
        for device in self.server.devices:
            total, free = (ram_total, ram_free) if device.type == "cpu" else (vram, vram)
            devices.append(
                {
                    "name": device.name,
                    "type": device.type,
                    "index": device.index,
                    "vram_total": total,
                    "vram_free": free,
                    "torch_vram_total": total if device.type == "cpu" else 0,
                    "torch_vram_free": free if device.type == "cpu" else 0,
                }
            )
        system = {
            "os": sys.platform,
            "ram_total": ram_total,
            "ram_free": ram_free,
            # upstream: `from comfyui_version import __version__` (server.py): the version of the
            # code that runs, which the image copies into /root/ComfyUI (entrypoint.sh)
            "comfyui_version": __version__,
            "python_version": sys.version,
            "pytorch_version": TORCH_VERSIONS[torch_build()],
            "embedded_python": False,
            "argv": sys.argv,
        }
        self.send_json(200, {"system": system, "devices": devices})

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

    def __init__(self, address: tuple[str, int], root: Path, devices: list[Device]):
        super().__init__(address, Handler)
        self.root = root
        self.devices = devices
        seconds = float(os.environ.get("STANDIN_EXEC_SECONDS", "0.3"))
        self.queue = PromptQueue(root / "output", seconds)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that went away (a healthcheck killed at its timeout, a pooled connection reset)
        # gets no traceback: aiohttp, ComfyUI's server, drops a connection its client reset without
        # an error line (web_protocol.py, RequestHandler.connection_lost).
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


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
    """main.py's order: parse the flags (argparse exits 2), import model_management (no
    usable torch device: traceback, exit 1), create the folders, then listen."""
    args = cli_args.parse(argv)
    try:
        devices = torch_devices(args.cpu, args.cuda_device)
    except StartupError as exc:
        sys.stderr.write(traceback_text(exc))
        sys.exit(1)
    # The folders ComfyUI creates at start, so volume mounts and listings find them.
    for folder in ("output", "input", "temp"):
        (args.root / folder).mkdir(parents=True, exist_ok=True)
    for folder in (d for dirs in MODEL_FOLDERS.values() for d in dirs):
        (args.root / "models" / folder).mkdir(parents=True, exist_ok=True)
    mark_as_comfyui_checkout(args.root)
    # --listen takes a comma list (bare: "0.0.0.0,::"); the stand-in binds the first.
    host = args.listen.split(",")[0]
    server = ComfyServer((host, args.port), args.root, devices)
    server.queue.start()
    line = {
        "time": now_iso(),
        "service": "comfyui-standin",
        "msg": f"Device: {devices[0].name}; To see the GUI go to: http://{host}:{args.port}",
    }
    print(json.dumps(line), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
