"""The worker closes itself to the tasks it runs: non-dumpable, and the bootstrap token
gone from its environment (airig/worker/hardening.py). The end-to-end proof, a shell task
scanning /proc in a real worker, is tests/integration/test_brain_worker_secrets.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airig.worker import __main__ as worker_main
from airig.worker.runner import Worker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def run_python(code: str, **env: str) -> dict:
    """``code`` in a fresh interpreter (what it does to its process stays there)."""
    prelude = "import ctypes, json, os, subprocess, sys\nfrom airig.worker import hardening\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + code], env={**os.environ, **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_forget_env_blanks_the_value_where_proc_shows_it():
    seen = run_python(
        "before = open('/proc/self/environ', 'rb').read()\n"
        "hardening.forget_env('SOME_TOKEN')\n"
        "after = open('/proc/self/environ', 'rb').read()\n"
        "print(json.dumps({'before': b'tok-123' in before, 'after': b'tok-123' in after,\n"
        "  'environ': os.environ.get('SOME_TOKEN'), 'getenv': os.getenv('SOME_TOKEN'),\n"
        "  'other': os.environ.get('OTHER_VALUE'), 'other_kept': b'keep-me' in after}))\n",
        SOME_TOKEN="tok-123", OTHER_VALUE="keep-me",
    )  # fmt: skip
    assert seen == {
        "before": True, "after": False, "environ": None, "getenv": None,
        "other": "keep-me", "other_kept": True,
    }  # fmt: skip


def test_make_undumpable_closes_the_worker_and_not_what_it_execs():
    get = "ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)"  # PR_GET_DUMPABLE
    seen = run_python(
        f"before = {get}\n"
        "hardening.make_undumpable()\n"
        f"child = subprocess.run([sys.executable, '-c', 'import ctypes; print({get})'],\n"
        "  capture_output=True, text=True).stdout.strip()\n"
        f"print(json.dumps({{'before': before, 'after': {get}, 'child': child}}))\n"
    )
    assert seen == {"before": 1, "after": 0, "child": "1"}


def test_the_worker_keeps_the_bootstrap_token_only_in_its_link(monkeypatch):
    """What main() leaves: no token in os.environ or the settings; the link has it, for a
    re-registration after the brain forgot this worker."""
    seen = {}

    def run(worker: Worker) -> int:
        seen.update(
            environ=os.environ.get("WORKER_BOOTSTRAP_TOKEN"),
            settings=worker.settings.bootstrap_token,
            link=worker.link._bootstrap,
        )
        return 0

    monkeypatch.setenv("WORKER_BOOTSTRAP_TOKEN", "boot-strap-token-1")
    monkeypatch.setattr(worker_main, "make_undumpable", lambda: seen.setdefault("closed", True))
    monkeypatch.setattr(Worker, "run", run)
    monkeypatch.setattr(Worker, "install_signal_handlers", lambda _: None)  # pytest's own
    monkeypatch.setattr(worker_main, "setup_json_logging", lambda: None)
    assert worker_main.main([]) == 0
    assert seen == {"closed": True, "environ": None, "settings": "", "link": "boot-strap-token-1"}
