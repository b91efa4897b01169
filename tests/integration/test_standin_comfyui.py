"""Contract tests of the ComfyUI stand-in against Comfy-Org/ComfyUI (main.py,
comfy/cli_args.py, comfy/model_management.py, execution.py, nodes.py, server.py) and
yanwk/comfyui-boot's entrypoint.sh.

Each test names the upstream file and function whose behaviour it pins."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from standins import conftest_helpers as helpers

standins = helpers.standins  # the factory fixture, used by name below


GRAPH = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a rig", "clip": ["4", 1]}},
    "3": {
        "class_type": "KSampler",
        "inputs": {
            "model": ["4", 0],
            "seed": 7,
            "steps": 2,
            "cfg": 7.0,
            "sampler_name": "euler",
            "scheduler": "normal",
            "positive": ["6", 0],
            "negative": ["6", 0],
            "latent_image": ["5", 0],
            "denoise": 1.0,
        },
    },
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "airig", "images": ["8", 0]}},
}


def wait_for_history(url: str, prompt_id: str) -> dict:
    for _ in range(100):
        history = requests.get(f"{url}/history/{prompt_id}", timeout=5).json()
        if history:
            return history[prompt_id]
        time.sleep(0.05)
    raise AssertionError("prompt never finished")


def test_comfyui_prompt_history_view(standins, tmp_path):
    root = tmp_path / "ComfyUI"
    (root / "models" / "checkpoints").mkdir(parents=True)
    (root / "models" / "checkpoints" / "sd15.safetensors").write_bytes(b"weights")
    server = standins("comfyui", env={"STANDIN_EXEC_SECONDS": "0.1"}, root=root)
    stats = requests.get(f"{server.url}/api/system_stats", timeout=5).json()
    assert stats["devices"][0]["type"] == "cpu"
    assert requests.get(f"{server.url}/models/checkpoints").json() == ["sd15.safetensors"]
    queued = requests.post(f"{server.url}/prompt", json={"prompt": GRAPH, "client_id": "t"})
    assert queued.status_code == 200 and queued.json()["node_errors"] == {}
    entry = wait_for_history(server.url, queued.json()["prompt_id"])
    assert entry["status"]["status_str"] == "success" and entry["status"]["completed"]
    image = entry["outputs"]["9"]["images"][0]
    assert image["type"] == "output" and image["filename"] == "airig_00001_.png"
    view = requests.get(f"{server.url}/api/view", params=image, timeout=5)
    assert view.status_code == 200 and view.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert view.content == (root / "output" / image["filename"]).read_bytes()


def test_comfyui_rejects_missing_checkpoint_and_bad_graphs(standins):
    server = standins("comfyui", env={"STANDIN_EXEC_SECONDS": "0.1"})
    bad = requests.post(f"{server.url}/prompt", json={"prompt": GRAPH}, timeout=5)
    assert bad.status_code == 400
    body = bad.json()
    assert body["error"]["type"] == "prompt_outputs_failed_validation"
    error = body["node_errors"]["4"]["errors"][0]
    assert error["type"] == "value_not_in_list"
    assert error["extra_info"]["received_value"] == "sd15.safetensors"
    assert body["node_errors"]["4"]["dependent_outputs"] == ["9"]
    no_output = {k: v for k, v in GRAPH.items() if k != "9"}
    resp = requests.post(f"{server.url}/prompt", json={"prompt": no_output}, timeout=5)
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "prompt_no_outputs"


def test_comfyui_refuses_out_of_range_and_unconvertible_values(standins, tmp_path):
    """execution.py validate_inputs: int()/float()/str() each widget value
    (invalid_input_type), then the spec's min and max; nodes.py's specs: EmptyLatentImage
    width/height 16..16384, KSampler steps 1..10000, cfg 0.0..100.0, seed 0..2**64-1."""
    root = tmp_path / "ComfyUI"
    (root / "models" / "checkpoints").mkdir(parents=True)
    (root / "models" / "checkpoints" / "sd15.safetensors").write_bytes(b"weights")
    server = standins("comfyui", env={"STANDIN_EXEC_SECONDS": "0.1"}, root=root)
    graph = json.loads(json.dumps(GRAPH))
    graph["5"]["inputs"]["width"] = -64
    graph["3"]["inputs"].update(steps=0, cfg=1e9, seed="abc")
    graph["6"]["inputs"]["text"] = 12345  # str(12345) converts: ComfyUI accepts it
    resp = requests.post(f"{server.url}/prompt", json={"prompt": graph}, timeout=5)
    assert resp.status_code == 400
    body = resp.json()
    width_spec = ["INT", {"default": 1024, "min": 16, "max": 16384, "step": 8}]
    assert body["node_errors"]["5"] == {
        "errors": [
            {
                "type": "value_smaller_than_min",
                "message": "Value -64 smaller than min of 16",
                "details": "width",
                "extra_info": {
                    "input_name": "width",
                    "input_config": width_spec,
                    "received_value": -64,
                },
            }
        ],
        "dependent_outputs": ["9"],
        "class_type": "EmptyLatentImage",
    }
    errors = {e["extra_info"]["input_name"]: e for e in body["node_errors"]["3"]["errors"]}
    assert set(errors) == {"seed", "steps", "cfg"} and "6" not in body["node_errors"]
    assert errors["seed"] == {
        "type": "invalid_input_type",
        "message": "Failed to convert an input value to a INT value",
        "details": "seed, abc, invalid literal for int() with base 10: 'abc'",
        "extra_info": {
            "input_name": "seed",
            "input_config": [
                "INT",
                {"default": 0, "min": 0, "max": 2**64 - 1, "control_after_generate": True},
            ],
            "received_value": "abc",
            "exception_message": "invalid literal for int() with base 10: 'abc'",
        },
    }
    assert (errors["steps"]["type"], errors["steps"]["message"]) == (
        "value_smaller_than_min",
        "Value 0 smaller than min of 1",
    )
    assert (errors["cfg"]["type"], errors["cfg"]["message"]) == (
        "value_bigger_than_max",
        "Value 1000000000.0 bigger than max of 100.0",
    )
    # validate_prompt's summary holds only the failing output's own reasons
    assert body["error"] == {
        "type": "prompt_outputs_failed_validation",
        "message": "Prompt outputs failed validation",
        "details": "",
        "extra_info": {},
    }
    fixed = json.loads(json.dumps(GRAPH))
    fixed["6"]["inputs"]["text"] = 12345
    fixed["3"]["inputs"]["steps"] = "4"  # int("4"): accepted as 4
    ok = requests.post(f"{server.url}/prompt", json={"prompt": fixed}, timeout=5)
    assert ok.status_code == 200, ok.text


def run_comfyui(tmp_path: Path, args: list[str], env: dict[str, str]):
    """server.py as main.py runs: returns (process, url); the caller stops it."""
    port = helpers.free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(helpers._SCRUBBED_PREFIXES)}
    command = [sys.executable, str(helpers.STANDINS_DIR / "comfyui" / "server.py")]
    command += ["--root", str(tmp_path / "ComfyUI"), "--listen", "127.0.0.1"]
    command += ["--port", str(port), *args]
    process = subprocess.Popen(
        command, env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return process, f"http://127.0.0.1:{port}"


def wait_stats(process: subprocess.Popen, url: str) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            return requests.get(f"{url}/system_stats", timeout=1).json()
        except requests.ConnectionError:
            time.sleep(0.05)
    raise AssertionError("the ComfyUI stand-in never answered")


NO_DRIVER = (
    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
    "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx"
)


@pytest.mark.parametrize(
    ("env", "last_line"),
    [
        ({"STANDIN_TORCH_BUILD": "cpu"}, "AssertionError: Torch not compiled with CUDA enabled"),
        ({"STANDIN_TORCH_BUILD": "cuda", "STANDIN_GPU_COUNT": "0"}, NO_DRIVER),
        (
            {"STANDIN_TORCH_BUILD": "cuda", "STANDIN_GPU_COUNT": "1", "CUDA_VISIBLE_DEVICES": ""},
            "RuntimeError: No CUDA GPUs are available",
        ),
        (
            {"STANDIN_TORCH_BUILD": "rocm", "STANDIN_GPU_COUNT": "0"},
            "RuntimeError: No HIP GPUs are available",
        ),
    ],
)
def test_comfyui_without_a_usable_device_dies_at_start_unless_cpu(tmp_path, env, last_line):
    """comfy/model_management.py: without --cpu, get_torch_device() asks torch.cuda at
    import, before the server listens; the process ends with the traceback (exit 1)."""
    process, _url = run_comfyui(tmp_path, [], env)
    _out, err = process.communicate(timeout=10)
    assert process.returncode == 1
    assert err.startswith("Traceback (most recent call last):")
    assert err.rstrip("\n").splitlines()[-1] == last_line
    process, url = run_comfyui(tmp_path, ["--cpu"], env)
    try:
        stats = wait_stats(process, url)
        assert [(d["type"], d["index"]) for d in stats["devices"]] == [("cpu", None)]
        assert "--cpu" in stats["system"]["argv"]
    finally:
        process.terminate()
        process.communicate(timeout=5)


def test_comfyui_reports_the_gpus_a_gpu_build_sees(tmp_path):
    env = {"STANDIN_TORCH_BUILD": "cuda", "STANDIN_GPU_COUNT": "2"}
    process, url = run_comfyui(tmp_path, [], env)
    try:
        devices = wait_stats(process, url)["devices"]
        assert [(d["type"], d["index"]) for d in devices] == [("cuda", 0), ("cuda", 1)]
        assert devices[0]["name"].endswith(": cudaMallocAsync")
    finally:
        process.terminate()
        process.communicate(timeout=5)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--cpuu"], "main.py: error: unrecognized arguments: --cpuu"),
        (
            ["--cpu", "--lowvram"],
            "main.py: error: argument --lowvram: not allowed with argument --cpu",
        ),
        (["--cpu", "--port"], "main.py: error: argument --port: expected one argument"),
    ],
)
def test_comfyui_refuses_the_flags_its_parser_refuses(tmp_path, args, error):
    """comfy/cli_args.py: parser.parse_args() — argparse's usage error, exit code 2."""
    process, _url = run_comfyui(tmp_path, args, {})
    _out, err = process.communicate(timeout=10)
    assert (process.returncode, err.splitlines()[-1]) == (2, error)


def test_comfyui_entrypoint_appends_cli_args_last(tmp_path):
    """yanwk/comfyui-boot entrypoint.sh: `python3 ./ComfyUI/main.py --listen --port 8188
    ${CLI_ARGS}` — CLI_ARGS split on spaces and last, so its --port wins."""
    port = helpers.free_port()
    entrypoint = helpers.STANDINS_DIR / "comfyui" / "entrypoint.sh"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(helpers._SCRUBBED_PREFIXES)}
    env = {
        **clean,
        "STANDIN_HOME": str(tmp_path),
        "STANDIN_BUNDLE": str(helpers.STANDINS_DIR / "comfyui"),
        "CLI_ARGS": f"--cpu  --listen 127.0.0.1 --port {port}",
    }
    # python is bash's child (no exec, as upstream): stop the whole session, not just bash
    process = subprocess.Popen(["bash", str(entrypoint)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        stats = wait_stats(process, f"http://127.0.0.1:{port}")
        assert stats["system"]["argv"] == [
            "./ComfyUI/main.py", "--listen", "--port", "8188",
            "--cpu", "--listen", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip
        assert stats["devices"][0]["type"] == "cpu"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=5)
    empty = subprocess.run(["bash", str(entrypoint)], env={**env, "CLI_ARGS": ""},
                           capture_output=True, text=True, timeout=20)  # fmt: skip
    assert empty.returncode == 1
    assert "AssertionError: Torch not compiled with CUDA enabled" in empty.stderr
