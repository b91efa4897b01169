"""The shell executor: one command in its own process group, with a timeout.

A tainted task never gets here: the command must come from a trusted plan author. Upstream
results never become command text: the brain turns each template of the command into a
variable reference ("${AIRIG_INPUT_1}") and sends the value in ``payload.inputs``, which
goes to the child as environment only, so the shell expands it but never parses it. The
child sees a small environment (never the worker's tokens) and runs inside the data
volume; the whole process group is killed on timeout, cancel, and after the command
exits (so a stray background child cannot outlive its task or hold the pipes open).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from airig.common.task_schemas import ShellPayload
from airig.executors.context import (
    ExecContext,
    ExecResult,
    TaskError,
    cancelled_error,
    elapsed_ms,
    pinned_by_runtime,
    resolve_data_path,
    timeout_error,
)

TAIL_BYTES = 4096
ERROR_TAIL_CHARS = 200  # how much of stderr goes into the one-line error message
TERM_GRACE_S = 2.0
# Only these survive from the worker's environment; everything else (tokens!) is dropped.
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER")
# The most one "NAME=value" string may hold in an exec (Linux MAX_ARG_STRLEN, 32 pages).
MAX_VARIABLE_BYTES = 131_072


class TailBuffer:
    """Drains a pipe on its own thread and keeps only the last ``limit`` bytes."""

    def __init__(self, pipe, limit: int = TAIL_BYTES) -> None:
        self._pipe, self._limit, self._data = pipe, limit, bytearray()
        self.total = 0
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        for chunk in iter(lambda: self._pipe.read1(65536), b""):
            self.total += len(chunk)
            self._data += chunk
            del self._data[: -self._limit]
        self._pipe.close()

    def text(self, join_s: float = 2.0) -> str:
        self._thread.join(join_s)
        return bytes(self._data).decode("utf-8", errors="replace")


def child_env(payload: ShellPayload, ctx: ExecContext) -> dict[str, str]:
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        AIRIG_DATA_DIR=str(ctx.data_dir),
        AIRIG_OUTPUT_DIR=str(ctx.output_dir),
        OLLAMA_HOST=ctx.ollama_url,
        COMFYUI_URL=ctx.comfyui_url,
        WHISPER_URL=ctx.whisper_url,
    )
    env.update(payload.env)
    env.update(payload.inputs)  # upstream values, after env: a plan cannot shadow them
    if ctx.gpu_index is not None:
        # Last, so a payload cannot move the command onto another worker's GPU. In a
        # pinned container the runtime shows only this worker's cards, renumbered from
        # 0: the host index would hide them, so the first visible card is the worker's.
        index = "0" if pinned_by_runtime() else str(ctx.gpu_index)
        env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = index
    return env


def execute_shell(payload: ShellPayload, ctx: ExecContext) -> ExecResult:
    if not ctx.trusted:
        raise TaskError(
            "a task with untrusted inputs may not run a command",
            error_type="untrusted_command",
            retryable=False,
            hint="shell commands must come from a trusted plan, never from task outputs",
        )
    _check_inputs(payload)
    cwd = resolve_data_path(ctx.data_dir, payload.cwd)
    if not cwd.is_dir():
        raise TaskError(
            f"cwd {payload.cwd!r} is not a directory", error_type="bad_input", retryable=False
        )
    argv = (
        ["/bin/sh", "-c", payload.command] if isinstance(payload.command, str) else payload.command
    )
    start = time.monotonic()
    process = _spawn(argv, cwd, child_env(payload, ctx))
    stdout, stderr = TailBuffer(process.stdout), TailBuffer(process.stderr)
    stop_error = _wait(process, ctx)
    _kill_group(process, signal.SIGKILL)  # leftovers of a finished command go too
    stdout_tail, stderr_tail = stdout.text(), stderr.text()
    output = {
        "exit_code": process.returncode,
        "stdout_tail": stdout_tail,
        "stderr_tail": stderr_tail,
        "stdout_bytes": stdout.total,
        "stderr_bytes": stderr.total,
    }
    if stop_error is not None:
        stop_error.details.update(output)
        raise stop_error
    if process.returncode != 0:
        tail = stderr_tail[-ERROR_TAIL_CHARS:].strip() or stdout_tail[-ERROR_TAIL_CHARS:].strip()
        raise TaskError(
            # a silent failure says only its code, with no dangling colon
            f"command exited with code {process.returncode}" + (f": {tail}" if tail else ""),
            error_type="nonzero_exit",
            details=output,
        )
    return ExecResult(output=output, metrics={"run_ms": elapsed_ms(start)})


def _check_inputs(payload: ShellPayload) -> None:
    """Refuse, for good, an upstream value no environment variable can carry."""
    for name, value in payload.inputs.items():
        size = len(f"{name}={value}".encode("utf-8", "surrogatepass")) + 1
        if "\0" in value or size > MAX_VARIABLE_BYTES:
            why = "holds a NUL byte" if "\0" in value else f"is {size} bytes"
            raise TaskError(
                f"the upstream value for {name} {why}: an environment variable holds at most "
                f"{MAX_VARIABLE_BYTES} bytes and no NUL",
                error_type="bad_input",
                retryable=False,
                hint="name one field ({{ tasks.<id>.output.<field> }}), or pass large data "
                "as a file on the shared data volume",
            )


def _spawn(argv: list[str], cwd, env: dict[str, str]) -> subprocess.Popen:
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as one
        )
    except OSError as exc:  # program missing, not executable ...
        raise TaskError(
            f"cannot start {argv[0]!r}: {exc.strerror}", error_type="bad_input", retryable=False
        ) from None


def _wait(process: subprocess.Popen, ctx: ExecContext) -> TaskError | None:
    """Wait for the command; on cancel or timeout stop the group and say which it was."""
    while True:
        try:
            process.wait(timeout=min(0.05, max(ctx.remaining(), 0.001)))
            return None
        except subprocess.TimeoutExpired:
            pass
        if ctx.cancel.is_set() or ctx.remaining() <= 0:
            # Decided before the grace period can move the clock past the deadline.
            error = cancelled_error() if ctx.cancel.is_set() else timeout_error(ctx.timeout_s)
            _terminate(process)
            return error


def _terminate(process: subprocess.Popen) -> None:
    _kill_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(process, signal.SIGKILL)
        process.wait()


def _kill_group(process: subprocess.Popen, sig: int) -> None:
    # start_new_session made the pid the group id; the group may already be gone.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
