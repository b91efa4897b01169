"""The shell executor: group kill on timeout and cancel, tails, refusal of tainted tasks."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from support import pid_alive, wait_until

from airig.executors.base import run_task
from airig.executors.context import TaskError
from airig.executors.shell import TAIL_BYTES


def wait_for_pid(path: Path) -> int:
    """The pid a command wrote into ``path``, once it is there."""
    return int(wait_until(lambda: path.exists() and path.read_text().strip(), path.name))


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


def test_a_silent_failure_says_its_code_alone(make_ctx):
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": "exit 1"}, make_ctx())
    assert caught.value.message == "command exited with code 1"


def test_timeout_kills_the_whole_process_group(make_ctx, tmp_path):
    # The child outlives the hang guard below unless the timeout kills it.
    command = "sleep 60 & echo $! > child.pid; wait"
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": command}, make_ctx(timeout_s=1.0))
    assert caught.value.error_type == "timeout"
    child = wait_for_pid(tmp_path / "data" / "child.pid")
    wait_until(lambda: not pid_alive(child), "the timed-out command's child to be gone")


def test_cancel_stops_the_command(make_ctx, tmp_path):
    ctx = make_ctx()
    pid_file = tmp_path / "data" / "child.pid"

    def cancel_once_started() -> None:
        wait_for_pid(pid_file)
        ctx.cancel.set()

    canceller = threading.Thread(target=cancel_once_started, daemon=True)
    canceller.start()
    command = "echo started; sleep 60 & echo $! > child.pid; wait"
    with pytest.raises(TaskError) as caught:
        run_task("shell", {"command": command}, ctx)
    canceller.join()
    assert caught.value.error_type == "cancelled"
    assert caught.value.details["stdout_tail"] == "started\n"
    child = wait_for_pid(pid_file)
    wait_until(lambda: not pid_alive(child), "the cancelled command's child to be gone")


def test_a_background_child_does_not_outlive_a_finished_command(make_ctx, tmp_path):
    command = "sleep 60 > /dev/null 2>&1 & echo $! > child.pid"
    run_task("shell", {"command": command}, make_ctx())
    child = wait_for_pid(tmp_path / "data" / "child.pid")
    wait_until(lambda: not pid_alive(child), "the finished command's child to be gone")


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
