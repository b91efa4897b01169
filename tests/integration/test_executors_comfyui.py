"""image and ComfyUI resource executors against the ComfyUI stand-in (real process)."""

from __future__ import annotations

import functools

import pytest
import requests
from standins.conftest_helpers import start_standin
from support import wait_until

from airig.executors.base import run_task
from airig.executors.context import TaskError

CHECKPOINT = "sd15-tiny.safetensors"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def comfyui_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("comfyui")
    (root / "models" / "checkpoints").mkdir(parents=True)
    (root / "models" / "checkpoints" / CHECKPOINT).write_bytes(b"weights")
    (root / "models" / "checkpoints" / "broken.ckpt").write_bytes(b"weights")
    env = {"STANDIN_EXEC_SECONDS": "0.3", "STANDIN_FAIL_EXECUTION": "broken.ckpt"}
    standin = start_standin("comfyui", root, env)
    yield standin.url
    standin.stop()


@pytest.fixture
def make_ctx(make_ctx, comfyui_url):
    """The shared builder, ComfyUI at the stand-in."""
    return functools.partial(make_ctx, comfyui_url=comfyui_url)


def wait_idle(url: str) -> None:
    def idle() -> bool:
        queue = requests.get(f"{url}/queue", timeout=5).json()
        return not queue["queue_running"] and not queue["queue_pending"]

    wait_until(idle, "ComfyUI's queue to empty")


def test_txt2img_saves_the_images_into_the_output_dir(make_ctx):
    ctx = make_ctx()
    payload = {"prompt": "a red fox", "checkpoint": CHECKPOINT, "seed": 7, "steps": 4}
    result = run_task("image", payload, ctx)
    assert result.files and result.files == result.output["images"]
    for name in result.files:
        assert (ctx.output_dir / name).read_bytes().startswith(PNG_SIGNATURE)
    assert result.output["seed"] == 7


def test_a_user_workflow_runs_as_given(make_ctx):
    graph = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CHECKPOINT}},
        "2": {
            "class_type": "EmptyLatentImage",
            "inputs": {"width": 64, "height": 64, "batch_size": 1},
        },
        "3": {"class_type": "VAEDecode", "inputs": {"samples": ["2", 0], "vae": ["1", 2]}},
        "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "mine"}},
    }
    result = run_task("image", {"workflow": graph}, make_ctx())
    assert [name.startswith("mine") for name in result.files] == [True]


def test_a_missing_checkpoint_is_not_retryable(make_ctx):
    with pytest.raises(TaskError) as caught:
        run_task("image", {"prompt": "x", "checkpoint": "absent.safetensors"}, make_ctx())
    assert (caught.value.error_type, caught.value.retryable) == ("model_not_found", False)
    assert "CheckpointLoaderSimple" in caught.value.message
    assert "1" in caught.value.details["node_errors"]


def test_a_failing_node_is_reported_with_its_exception(make_ctx):
    with pytest.raises(TaskError) as caught:
        run_task("image", {"prompt": "x", "checkpoint": "broken.ckpt"}, make_ctx())
    assert caught.value.error_type == "execution_error"
    assert "stand-in failure" in caught.value.message


def test_timeout_interrupts_the_prompt(make_ctx, comfyui_url):
    with pytest.raises(TaskError) as caught:
        run_task("image", {"prompt": "x", "checkpoint": CHECKPOINT}, make_ctx(timeout_s=0.1))
    assert caught.value.error_type == "timeout"
    wait_idle(comfyui_url)
    prompt_id = caught.value.details["prompt_id"]
    entry = requests.get(f"{comfyui_url}/history/{prompt_id}", timeout=5).json().get(prompt_id)
    # Either dropped from the queue before it ran, or interrupted while running.
    if entry is not None:
        kinds = [message[0] for message in entry["status"]["messages"]]
        assert "execution_interrupted" in kinds


def test_unload_frees_comfyui(make_ctx):
    payload = {"action": "unload", "service": "comfyui"}
    result = run_task("resource", payload, make_ctx())
    assert result.output["unloaded"] and result.metrics["unload_ms"] >= 0
