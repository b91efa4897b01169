"""A client that resets its connection leaves no traceback in a server's log.

The kit's watch test (tests/e2e/test_kit_watch.py) fails on any ``Traceback`` line in a
container's log. In CI it found one in the Ollama stand-in: http.server's
handle_one_request raises ConnectionResetError when a client resets a kept-alive
connection (a healthcheck killed at its timeout, a worker's pool torn down), and
socketserver prints it. Upstream's servers (Go's net/http for Ollama, aiohttp for
ComfyUI, uvicorn for speaches) drop such a connection without a line, and so must the
stand-ins and the kit's own models gate.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
import urllib.request

import pytest
from standins import conftest_helpers as helpers

from airig.services import gate

standins = helpers.standins  # the factory fixture, used by name below


def reset_after_a_request(port: int, path: str) -> None:
    """One answered request on a kept-alive connection, then a reset (SO_LINGER 0)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # and one reset in the middle of a request line
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHo".encode())
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.5)  # the server's thread reads the reset


@pytest.mark.parametrize("name", helpers.NAMES)
def test_a_stand_in_logs_no_traceback_for_a_client_reset(standins, name):
    server = standins(name)
    reset_after_a_request(server.port, helpers.READY_PATHS[name])
    # the server still answers, and said nothing about the reset
    urllib.request.urlopen(server.url + helpers.READY_PATHS[name], timeout=5).close()
    assert "Traceback" not in server.log()


def test_the_models_gate_logs_no_traceback_for_a_client_reset(tmp_path):
    env = {"AIRIG_VERIFY_CACHES": str(tmp_path / "none.json"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "airig.services.gate"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{gate.PORT}/health", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the gate never answered"
                time.sleep(0.2)
        reset_after_a_request(gate.PORT, "/health")
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        assert "gate.stopped" in out
        assert "Traceback" not in out
    finally:
        proc.kill()
