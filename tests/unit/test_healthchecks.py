"""The containers' healthchecks (airig/common/healthcheck.py): the standard library only,
the settings' names and defaults kept equal to the services' settings, and every way a
service can answer wrong is one line and exit 1, never a traceback or a pass."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airig.brain.settings import BrainSettings
from airig.common import healthcheck
from airig.gateway.settings import GatewaySettings
from airig.worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "pair,model,field",
    [
        (healthcheck.BRAIN_PORT, BrainSettings, "listen_port"),
        (healthcheck.GATEWAY_PORT, GatewaySettings, "port"),
        (healthcheck.WORKER_STATE_FILE, WorkerSettings, "state_file"),
    ],
)
def test_the_checks_read_what_the_settings_declare(pair, model, field):
    declared = model.model_fields[field]
    assert pair == (declared.alias, str(declared.default))


class Answer(BaseHTTPRequestHandler):
    status = 200
    body = b""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(status: int, body: bytes) -> int:
        handler = type("H", (Answer,), {"status": status, "body": body})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(name, check, capsys):
    code = healthcheck.run(name, check)
    err = capsys.readouterr().err
    assert err.count("\n") == (0 if code == 0 else 1), err  # one line, or nothing
    return code, err


def test_a_brain_that_says_ok_passes(serve, capsys):
    port = serve(200, b'{"status": "ok", "store": "sqlite"}')
    assert run("brain", lambda: healthcheck.brain(port), capsys) == (0, "")


@pytest.mark.parametrize(
    "status,body,said",
    [
        (503, b'{"detail": "the store is read-only"}', "HTTP 503: the store is read-only"),
        (503, b"<html>bad gateway</html>", "HTTP 503"),  # a proxy's page, not the brain
        (200, b'{"status": "degraded"}', "status 'degraded'"),
        (200, b"[1, 2]", "not a JSON object"),  # valid JSON, wrong shape
        (200, b"not json\x00", "JSONDecodeError"),
        (200, b'{"status": "ok"' + b" " * (1 << 17) + b"}", "JSONDecodeError"),  # over 64 KiB
        (200, b"", "JSONDecodeError"),
    ],
)
def test_a_brain_that_answers_wrong_fails_in_one_line(serve, capsys, status, body, said):
    port = serve(status, body)
    code, err = run("brain", lambda: healthcheck.brain(port), capsys)
    assert code == 1 and err.startswith("brain unhealthy: ") and said in err


def test_nothing_listening_fails_in_one_line(capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        code, err = run("brain", lambda: healthcheck.brain(port), capsys)
    assert code == 1 and "Connection refused" in err


# (the environment cannot hold a NUL: "8080x" is the nearest a user can type)
@pytest.mark.parametrize(
    "value", ["abc", "0", "65536", "8080x", "-1", "８０８０", "9" * 400, "80 80"]
)
def test_a_port_that_is_no_port_fails_in_one_line(monkeypatch, capsys, value):
    monkeypatch.setenv("BRAIN_LISTEN_PORT", value)
    code, err = run("brain", healthcheck.brain, capsys)
    assert code == 1 and "BRAIN_LISTEN_PORT=" in err and "is not a port" in err


def test_the_gateway_needs_its_key(serve, capsys):
    port = serve(200, b'{"ok": true, "key_loaded": false}')
    code, err = run("gateway", lambda: healthcheck.gateway(port), capsys)
    assert code == 1 and "no provider key loaded" in err
    port = serve(200, b'{"ok": true, "key_loaded": true}')
    assert run("gateway", lambda: healthcheck.gateway(port), capsys) == (0, "")


@pytest.mark.parametrize(
    "content",
    [
        None,  # no file: never beat
        b"",
        b"[]",  # JSON, not an object
        b'{"ok": true, "at": "yesterday"}',
        b'{"ok": true, "at": NaN}',  # json accepts NaN: it is no time
        b'{"ok": true, "at": Infinity}',
        b'{"ok": true, "at": 1e400}',
        b'{"ok": true}',  # no time: 1970
        b"\x00\xff" * 40000,  # binary junk, larger than the read limit
    ],
)
def test_a_heartbeat_file_that_proves_nothing_fails(tmp_path, capsys, content):
    path = tmp_path / "state.json"
    if content is not None:
        path.write_bytes(content)
    code, err = run("worker", lambda: healthcheck.worker(60, str(path)), capsys)
    assert code == 1 and err.startswith("worker unhealthy: ")


def test_a_recent_good_heartbeat_passes_and_a_future_one_too(tmp_path, capsys):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"ok": True, "at": time.time() - 5}))
    assert run("worker", lambda: healthcheck.worker(60, str(path)), capsys) == (0, "")
    # a clock stepped back after the beat: a negative age is recent, not a failure
    path.write_text(json.dumps({"ok": True, "at": time.time() + 30}))
    assert run("worker", lambda: healthcheck.worker(60, str(path)), capsys) == (0, "")


@pytest.mark.parametrize(
    "module,env",
    [
        ("airig.brain", {"BRAIN_LISTEN_PORT": "1"}),
        ("airig.gateway", {"AIRIG_GATEWAY_PORT": "1"}),
        ("airig.worker", {"WORKER_STATE_FILE": "/nonexistent/state.json"}),
    ],
)
def test_python_m_check_is_the_light_check_and_exits_1(module, env, tmp_path):
    """What compose runs: `python -m MODULE --check` fails in one stderr line, and imports
    neither pydantic nor requests (test_compose_conventions.py checks the import set)."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--check"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unhealthy: " in lines[0], done.stderr
