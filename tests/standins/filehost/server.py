"""File host stand-in for tests: deterministic downloads for ComfyUI model provisioning.

Run: python server.py [--host H] [--port N]   (default 0.0.0.0:8080)
  GET|HEAD /files/<name>?size=N         N pseudo-random bytes derived from name and size,
                                        with Content-Length, ETag and Range (206) support
  GET      /files/<name>.sha256?size=N  the hex sha256 of that file
  GET      /health                      "OK"
Knobs: STANDIN_FILE_BYTES (size when ?size is absent, default 1 MiB),
STANDIN_DROP_AFTER_BYTES=N (the first GET of each file closes the connection after N
bytes, to test resumed downloads).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 256 * 1024
# RFC 9110 single byte range; multiple ranges are answered with the whole file, which
# the RFC allows (a server may ignore Range).
SINGLE_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def file_chunks(name: str, size: int, start: int = 0) -> Iterator[bytes]:
    """Bytes start..size of the file; chunk i is shake_256(name:size#i)."""
    first = start // CHUNK
    for index in range(first, (size + CHUNK - 1) // CHUNK):
        length = min(CHUNK, size - index * CHUNK)
        chunk = hashlib.shake_256(f"{name}:{size}#{index}".encode()).digest(length)
        yield chunk[start - index * CHUNK :] if index == first else chunk


def file_sha256(name: str, size: int) -> str:
    hasher = hashlib.sha256()
    for chunk in file_chunks(name, size):
        hasher.update(chunk)
    return hasher.hexdigest()


def byte_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """(first, last) for a satisfiable single range, None for no/ignored range,
    "unsatisfiable" for a 416."""
    match = SINGLE_RANGE.fullmatch(header.strip()) if header else None
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":  # suffix range: the last N bytes
        count = int(last)
        return (max(0, size - count), size - 1) if count else "unsatisfiable"
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    return (start, end) if start <= end and start < size else "unsatisfiable"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FileHost

    def log_message(self, fmt: str, *args: object) -> None:
        # The client's User-Agent shows which downloader fetched a file (comfy-cli's httpx
        # or the kit's requests fallback).
        agent = self.headers.get("User-Agent", "") if hasattr(self, "headers") else ""
        line = {
            "time": now_iso(),
            "service": "filehost-standin",
            "msg": fmt % args,
            "agent": agent,
        }
        print(json.dumps(line), flush=True)

    def send_text(self, status: int, text: str, extra: dict | None = None) -> None:
        data = text.encode()
        self.send_response(status)
        for key, value in {"Content-Type": "text/plain", **(extra or {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        if parts.path == "/health":
            self.send_text(200, "OK")
            return
        if not parts.path.startswith("/files/") or len(parts.path) <= len("/files/"):
            self.send_text(404, "not found")
            return
        name = unquote(parts.path[len("/files/") :])
        default = os.environ.get("STANDIN_FILE_BYTES", str(1024 * 1024))
        try:
            size = int(parse_qs(parts.query).get("size", [default])[0])
        except ValueError:
            self.send_text(400, "size must be an integer")
            return
        if name.endswith(".sha256"):
            self.send_text(200, file_sha256(name[: -len(".sha256")], size) + "\n")
        else:
            self.send_file(name, size)

    def send_file(self, name: str, size: int) -> None:
        wanted = byte_range(self.headers.get("Range"), size)
        etag = f'"{hashlib.sha256(f"{name}:{size}".encode()).hexdigest()[:16]}"'
        if wanted == "unsatisfiable":
            self.send_text(416, "range not satisfiable", {"Content-Range": f"bytes */{size}"})
            return
        first, last = wanted if isinstance(wanted, tuple) else (0, size - 1)
        self.send_response(206 if isinstance(wanted, tuple) else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(last - first + 1))
        if isinstance(wanted, tuple):
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        budget = self.server.drop_budget(name, size)
        remaining = last - first + 1
        for chunk in file_chunks(name, size, first):
            piece = chunk[:remaining]
            if budget is not None and len(piece) >= budget:
                self.wfile.write(piece[:budget])
                self.close_connection = True  # the simulated network failure
                return
            self.wfile.write(piece)
            remaining -= len(piece)
            budget = None if budget is None else budget - len(piece)
            if remaining <= 0:
                return


class FileHost(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]):
        super().__init__(address, Handler)
        self._served: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def drop_budget(self, name: str, size: int) -> int | None:
        """Bytes this GET may send before the connection drops; None = no drop."""
        limit = os.environ.get("STANDIN_DROP_AFTER_BYTES")
        with self._lock:
            first_time = (name, size) not in self._served
            self._served.add((name, size))
        return int(limit) if limit and first_time else None

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that went away (a healthcheck killed at its timeout, a pooled connection reset)
        # gets no traceback: a file host's client going away is not a server error (Go's net/http
        # and aiohttp both drop it quietly).
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="file host stand-in for tests")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--root", help="accepted for symmetry with the other stand-ins")
    args = parser.parse_args(argv)
    server = FileHost((args.host, args.port))
    line = {
        "time": now_iso(),
        "service": "filehost-standin",
        "msg": f"Listening on {args.host}:{args.port}",
    }
    print(json.dumps(line), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
