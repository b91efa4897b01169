#!/usr/bin/env python3
"""`ollama` command of the stand-in image (installed as /bin/ollama).

Subcommands mirror the real CLI where the kit relies on them: `serve`, `list` (the
compose healthcheck: talks to the server, exits 1 when it is down), `pull`, and
`--version`. The client finds the server through OLLAMA_HOST, like the real one.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

VERSION = os.environ.get("STANDIN_OLLAMA_VERSION", "0.20.6")
CONNECT_ERROR = "Error: could not connect to ollama server, run 'ollama serve' to start it"


def base_url() -> str:
    value = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434")
    parts = urlsplit(value if "://" in value else f"http://{value}")
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"  # a listen-everywhere address is reached on loopback
    return f"{parts.scheme}://{host}:{parts.port or 11434}"


def request(path: str, body: dict | None = None, timeout: float = 10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base_url() + path, data=data, method="POST" if data else "GET")
    return urllib.request.urlopen(req, timeout=timeout)


def human_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size} GB"


def cmd_list() -> int:
    with request("/api/tags") as resp:
        models = json.load(resp)["models"]
    rows = [("NAME", "ID", "SIZE", "MODIFIED")]
    rows += [(m["name"], m["digest"][:12], human_size(m["size"]), m["modified_at"]) for m in models]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("    ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return 0


def cmd_pull(name: str) -> int:
    with request("/api/pull", {"model": name, "stream": True}, timeout=600) as resp:
        for raw in resp:
            line = json.loads(raw)
            if "error" in line:
                print(f"Error: {line['error']}", file=sys.stderr)
                return 1
            print(line["status"])
    return 0


def cmd_version() -> int:
    try:
        with request("/api/version", timeout=3) as resp:
            print(f"ollama version is {json.load(resp)['version']}")
    except OSError:
        # Like upstream: a warning, but exit 0 (so it is no healthcheck).
        print("Warning: could not connect to a running Ollama instance", file=sys.stderr)
        print(f"Warning: client version is {VERSION}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("Usage: ollama [serve | list | pull MODEL | --version]")
        return 0
    command, rest = argv[0], argv[1:]
    if command in ("-v", "--version"):
        return cmd_version()
    if command == "serve":
        from server import main as serve  # the server lives next to this script

        serve([])
        return 0
    try:
        if command in ("list", "ls"):
            return cmd_list()
        if command == "pull" and len(rest) == 1:
            return cmd_pull(rest[0])
    except urllib.error.HTTPError as exc:
        print(f"Error: {json.load(exc).get('error', exc.reason)}", file=sys.stderr)
        return 1
    except OSError:
        print(CONNECT_ERROR, file=sys.stderr)
        return 1
    print(f'Error: unknown command {command!r} for "ollama"', file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
