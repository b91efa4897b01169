"""The kit's own long-running services stop on SIGTERM, as `docker stop` sends it.

Each runs as PID 1 in its container, where the kernel drops a signal the process has no
handler for, so a service without one waits out the grace period and is SIGKILLed (exit
137, seen by tests/e2e/test_kit_watch.py). Outside a container the default action is
death by the signal (return code -15), so a clean exit 0 here shows a handler ran."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

from airig.services import gate


def test_the_models_gate_exits_cleanly_on_sigterm(tmp_path):
    env = {"AIRIG_VERIFY_CACHES": str(tmp_path / "none.json"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "airig.services.gate"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{gate.PORT}/health", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "the gate never answered"
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "gate.stopped" in proc.stdout.read()
    finally:
        proc.kill()
