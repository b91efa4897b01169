"""Plain helpers the test files share (the fixtures built on them are in tests/conftest.py).

``tests/`` is on ``sys.path`` through pytest's ``pythonpath``: ``from support import ...``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STACKS = ("01-infra", "02-compute", "03-agents")
# Never part of a kit copy: the wheelhouse, a user's .env (or the link `up` makes), and
# what `up` generates.
NOT_COPIED = shutil.ignore_patterns("wheels", ".env", ".airig")
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers there
NOBODY = 65534  # the unprivileged user and group of Debian and Ubuntu
# A hang guard, not a measurement: how long a wait may last before the test calls it hung.
HANG_GUARD_S = 30.0


# ------------------------------------------------------------------ the kit
def copy_kit(dest: Path) -> Path:
    """A copy of what the launcher reads at ``dest``: every stack folder (compose files,
    02-compute/images.yaml, 03-agents/compose.join.yaml, build contexts) and .env.example."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in STACKS:
        shutil.copytree(ROOT / name, dest / name, ignore=NOT_COPIED)
    shutil.copy(ROOT / ".env.example", dest / ".env.example")
    return dest


def write_env(kit: Path, **values: str) -> Path:
    """The kit's .env from .env.example with the secrets filled in and ``values`` set
    (replacing the example's line, else appended); .env.example gets the same secrets."""
    env = (kit / ".env.example").read_text().replace("change-me", "s3cret")
    (kit / ".env.example").write_text(env)
    lines = env.splitlines()
    for key, value in values.items():
        found = [i for i, line in enumerate(lines) if line.startswith(f"{key}=")]
        for i in found:
            lines[i] = f"{key}={value}"
        if not found:
            lines.append(f"{key}={value}")
    (kit / ".env").write_text("\n".join(lines) + "\n")
    return kit / ".env"


# ------------------------------------------------------------------ the command line
def run_cli(monkeypatch, capsys, docker: Any, *args: str) -> tuple[int, str, str]:
    """Run ``start_services.py ARGS`` in this process: (exit code, stdout, stderr).

    ``docker`` replaces the engine adapter the CLI makes (None keeps the real one)."""
    import airig.launcher.cli.app as cli_app

    if docker is not None:
        monkeypatch.setattr(cli_app, "Docker", lambda: docker)
    monkeypatch.setattr(sys, "argv", ["start_services.py", *args])
    code = 0
    try:
        cli_app.main()
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def error_lines(err: str) -> list[str]:
    """The red ✘ lines of a command's stderr."""
    return [line for line in err.splitlines() if line.startswith("✘")]


def one_error(code: int, err: str, *words: str) -> str:
    """Bad input: exit ≠ 0, no traceback, exactly one ✘ line naming ``words``, and a
    hint (→). Returns that line."""
    assert code != 0
    assert "Traceback" not in err
    errors = error_lines(err)
    assert len(errors) == 1, err
    for word in words:
        assert word in errors[0], errors[0]
    assert "→" in err
    return errors[0]


# ------------------------------------------------------------------ executors
def exec_context(tmp_path: Path, **overrides: Any):
    """An executor's ExecContext: trusted, no service reachable, 20 s runtime limit, data
    in ``tmp_path/data`` and output in ``tmp_path/out``; ``overrides`` win."""
    from airig.executors.context import ExecContext

    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    values: dict[str, Any] = {
        "ollama_url": NOWHERE,
        "comfyui_url": NOWHERE,
        "whisper_url": NOWHERE,
        "data_dir": data,
        "output_dir": out,
        "timeout_s": 20.0,
        "cancel": threading.Event(),
        "trusted": True,
    }
    return ExecContext(**{**values, **overrides})


# ------------------------------------------------------------------ waiting
def wait_until(check: Callable[[], Any], what: str, guard_s: float = HANG_GUARD_S) -> Any:
    """Poll ``check`` until it returns something true and return that. The guard only
    stops a hung test; it is never what a test asserts."""
    deadline = time.monotonic() + guard_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {guard_s:g} s for {what}")
        time.sleep(0.02)
    return value


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie (exited, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# ------------------------------------------------------------------ privileges
def unprivileged(call: Callable[[], Any]) -> list[str] | None:
    """Run ``call`` as an unprivileged user: as is when pytest is not root, else in a
    forked child as ``nobody`` (root passes every permission check, and CI runs as root).

    Returns None when ``call`` returned, else [exception class name, its message]."""
    if os.geteuid() != 0:
        return _outcome(call)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, run, report, and leave without cleanup
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            outcome = _outcome(call)
        except BaseException as exc:  # reported to the parent
            outcome = ["child failed", repr(exc)]
        try:
            os.write(write, json.dumps(outcome).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        reported = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(reported)


def _outcome(call: Callable[[], Any]) -> list[str] | None:
    try:
        call()
    except Exception as exc:
        return [type(exc).__name__, getattr(exc, "message", str(exc))]
    return None
