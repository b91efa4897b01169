"""The shell executor: group kill on timeout and cancel, tails, refusal of tainted tasks."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from airig.executors.base import run_task
from airig.executors.context import ExecContext, TaskError
from airig.executors.shell import TAIL_BYTES


@pytest.fixture
def make_ctx(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()

    def make(**overrides) -> ExecContext:
        values = dict(
            ollama_url="http://127.0.0.1:9",
            comfyui_url="http://127.0.0.1:9",
            whisper_url="http://127.0.0.1:9",
            data_dir=data,
            output_dir=out,
            timeout_s=10.0,
            cancel=threading.Event(),
            trusted=True,
        )
        values.update(overrides)
        return ExecContext(**values)

    return make


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.01)
    raise AssertionError("the command never wrote its child's pid")


def test_success_reports_exit_code_and_tails(make_ctx):
    result = run_task("shell", {"command": "echo out; echo err >&2"}, make_ctx())
    assert result.output["exit_code"] == 0
    assert result.output["stdout_tail"] == "out\n"
    assert result.output["stderr_tail"] == "err\n"


def test_tail_keeps_only_the_last_bytes(make_ctx):
    command = ["python3", "-c", "import sys; sys.stdout.write('a' * 10000 + 'END')"]
    result = run_task("shell", {"command": command}, make_ctx())
    assert len(result.output["stdout_tail"]) == TAIL_BYTES
    assert result.output["stdout_tail"].endswith("aEND")
    assert result.output["stdout_bytes"] == 10003


def test_nonzero_exit_is_retryable_and_carries_code_and_tail(make_ctx):
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": "echo partial; echo boom >&2; exit 3"}, make_ctx())
    error = caught.value
    assert (error.error_type, error.retryable) == ("nonzero_exit", True)
    assert error.details["exit_code"] == 3
    assert error.details["stdout_tail"] == "partial\n"
    assert "boom" in error.message


def test_timeout_kills_the_whole_process_group(make_ctx, tmp_path):
    pid_file = tmp_path / "data" / "child.pid"
    command = "sleep 30 & echo $! > child.pid; wait"
    start = time.monotonic()
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": command}, make_ctx(timeout_s=0.5))
    assert caught.value.error_type == "timeout"
    assert time.monotonic() - start < 5
    assert not pid_alive(wait_for_pid(pid_file))


def test_cancel_stops_the_command(make_ctx, tmp_path):
    ctx = make_ctx()
    threading.Timer(0.3, ctx.cancel.set).start()
    start = time.monotonic()
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": "echo started; sleep 30"}, ctx)
    assert caught.value.error_type == "cancelled"
    assert caught.value.details["stdout_tail"] == "started\n"
    assert time.monotonic() - start < 5


def test_a_background_child_does_not_outlive_a_finished_command(make_ctx, tmp_path):
    pid_file = tmp_path / "data" / "child.pid"
    command = "sleep 30 > /dev/null 2>&1 & echo $! > child.pid"
    run_task("shell", {"command": command}, make_ctx())
    pid = wait_for_pid(pid_file)
    deadline = time.monotonic() + 2
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(pid)


def test_tainted_task_never_runs_a_command(make_ctx, tmp_path):
    marker = tmp_path / "data" / "ran"
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": "touch ran"}, make_ctx(trusted=False))
    assert (caught.value.error_type, caught.value.retryable) == ("untrusted_command", False)
    assert not marker.exists()


def test_child_sees_no_worker_secrets(make_ctx, monkeypatch):
    monkeypatch.setenv("WORKER_BOOTSTRAP_TOKEN", "s3cret")
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    result = run_task("shell", {"command": "env", "env": {"MINE": "1"}}, make_ctx(gpu_index=1))
    env = result.output["stdout_tail"]
    assert "s3cret" not in env
    assert "MINE=1" in env
    assert "CUDA_VISIBLE_DEVICES=1" in env


def test_in_a_pinned_container_the_workers_gpu_is_device_0(make_ctx, monkeypatch):
    """Docker's NVIDIA device request renumbers the pinned card: host GPU 3 is device 0."""
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "3")
    result = run_task("shell", {"command": "env"}, make_ctx(gpu_index=3))
    assert "CUDA_VISIBLE_DEVICES=0" in result.output["stdout_tail"]


def test_runs_inside_the_data_volume(make_ctx, tmp_path):
    (tmp_path / "data" / "sub").mkdir()
    result = run_task("shell", {"command": "pwd", "cwd": "sub"}, make_ctx())
    assert result.output["stdout_tail"].strip() == str((tmp_path / "data" / "sub").resolve())


def test_a_symlink_out_of_the_data_volume_is_refused(make_ctx, tmp_path):
    (tmp_path / "data" / "escape").symlink_to(tmp_path)
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": "pwd", "cwd": "escape"}, make_ctx())
    assert (caught.value.error_type, caught.value.retryable) == ("bad_input", False)


def test_missing_program_is_bad_input(make_ctx):
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": ["/no/such/program"]}, make_ctx())
    assert (caught.value.error_type, caught.value.retryable) == ("bad_input", False)
