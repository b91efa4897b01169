"""The image executor: ComfyUI ``/prompt`` -> ``/history/{id}`` -> ``/view``."""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from pathlib import Path

import requests

from airig.common.task_schemas import ImagePayload
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms

_POLL_START_S = 0.1
_POLL_MAX_S = 1.0
_REQUEST_TIMEOUT = (5.0, 60.0)
_FAILURES = ("execution_error", "execution_interrupted")


def build_txt2img_graph(payload: ImagePayload, seed: int) -> dict:
    """The smallest txt2img graph in ComfyUI's API format (node id -> class + inputs)."""
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": payload.checkpoint}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": payload.prompt, "clip": ["1", 1]}},
        "3": {
            "class_type": "CLIPTextEncode",
            "inputs": {"text": payload.negative_prompt, "clip": ["1", 1]},
        },
        "4": {
            "class_type": "EmptyLatentImage",
            "inputs": {
                "width": payload.width,
                "height": payload.height,
                "batch_size": payload.batch_size,
            },
        },
        "5": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["1", 0],
                "positive": ["2", 0],
                "negative": ["3", 0],
                "latent_image": ["4", 0],
                "seed": seed,
                "steps": payload.steps,
                "cfg": payload.cfg,
                "sampler_name": payload.sampler_name,
                "scheduler": payload.scheduler,
                "denoise": 1.0,
            },
        },
        "6": {"class_type": "VAEDecode", "inputs": {"samples": ["5", 0], "vae": ["1", 2]}},
        "7": {
            "class_type": "SaveImage",
            "inputs": {"images": ["6", 0], "filename_prefix": payload.filename_prefix},
        },
    }


def execute_image(payload: ImagePayload, ctx: ExecContext) -> ExecResult:
    seed = payload.seed if payload.seed is not None else random.randrange(2**32)
    graph = payload.workflow or build_txt2img_graph(payload, seed)
    base = ctx.comfyui_url.rstrip("/")
    start = time.monotonic()
    with requests.Session() as session:
        try:
            prompt_id = _submit(session, base, graph)
            entry = _wait(session, base, prompt_id, ctx)
            queued_ms = elapsed_ms(start)
            files = _download(session, base, entry, ctx.output_dir)
        except requests.Timeout:
            raise TaskError("ComfyUI did not answer in time", error_type="timeout") from None
        except requests.RequestException as exc:
            raise TaskError(
                f"ComfyUI at {base} is unreachable: {type(exc).__name__}",
                error_type="service_unreachable",
                hint="check the comfyui service (docker compose ps / logs)",
            ) from None
    output: dict[str, object] = {"prompt_id": prompt_id, "images": files}
    if payload.workflow is None:
        output["seed"] = seed
    return ExecResult(
        output=output, files=files, metrics={"run_ms": queued_ms, "wall_ms": elapsed_ms(start)}
    )


def _submit(session: requests.Session, base: str, graph: dict) -> str:
    client_id = uuid.uuid4().hex
    response = session.post(
        f"{base}/prompt", json={"prompt": graph, "client_id": client_id}, timeout=_REQUEST_TIMEOUT
    )
    if response.status_code == 400:
        raise _refused(response)
    if not response.ok:
        raise TaskError(
            f"ComfyUI failed to queue the prompt (HTTP {response.status_code})",
            error_type="service_unavailable",
        )
    return response.json()["prompt_id"]


def _refused(response: requests.Response) -> TaskError:
    """A 400 from /prompt: the graph is wrong. Name each failing node and why."""
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text[:300]}
    summary, missing_model = summarise_node_errors(body)
    return TaskError(
        f"ComfyUI refused the workflow: {summary}",
        error_type="model_not_found" if missing_model else "bad_input",
        retryable=False,
        hint="check node inputs and that the models are in ComfyUI's models/ folders",
        details={"node_errors": body.get("node_errors") or {}},
    )


def summarise_node_errors(body: dict) -> tuple[str, bool]:
    """One line per failing node, and whether a loader named a model that is not there."""
    lines, missing_model = [], False
    node_errors = body.get("node_errors") or {}
    for node_id, node in node_errors.items() if isinstance(node_errors, dict) else []:
        for error in node.get("errors", []):
            lines.append(f"node {node_id} ({node.get('class_type', '?')}): {_describe(error)}")
            loader = "Loader" in str(node.get("class_type", ""))
            missing_model |= loader and error.get("type") == "value_not_in_list"
    if not lines:
        error = body.get("error")
        lines.append(_describe(error) if isinstance(error, dict) else str(error or "unknown error"))
    return "; ".join(lines)[:1000], missing_model


def _describe(error: dict) -> str:
    message = error.get("message", "error")
    details = error.get("details")
    return f"{message}: {details}" if details else message


def _wait(session: requests.Session, base: str, prompt_id: str, ctx: ExecContext) -> dict:
    """Poll the history until the prompt ends; on cancel or timeout stop it in ComfyUI."""
    delay = _POLL_START_S
    while True:
        if ctx.cancel.is_set() or ctx.remaining() <= 0:
            _stop(session, base, prompt_id)
            try:
                ctx.check()
            except TaskError as exc:
                exc.details["prompt_id"] = prompt_id
                raise
        response = session.get(f"{base}/history/{prompt_id}", timeout=_REQUEST_TIMEOUT)
        response.raise_for_status()
        entry = response.json().get(prompt_id)
        if entry and _finished(entry, prompt_id):
            return entry
        ctx.cancel.wait(min(delay, ctx.remaining()))
        delay = min(delay * 1.5, _POLL_MAX_S)


def _finished(entry: dict, prompt_id: str) -> bool:
    status = entry.get("status") or {}
    if status.get("status_str") == "error":
        raise _execution_error(status, prompt_id)
    return bool(status.get("completed")) or status.get("status_str") == "success"


def _execution_error(status: dict, prompt_id: str) -> TaskError:
    kind, detail = "execution_error", {}
    for message in status.get("messages", []):
        if isinstance(message, list) and len(message) == 2 and message[0] in _FAILURES:
            kind, detail = message
    if kind == "execution_interrupted":
        # Not ours (we stop only on cancel or timeout): someone interrupted ComfyUI.
        return TaskError(f"ComfyUI prompt {prompt_id} was interrupted", error_type="interrupted")
    text = f"{detail.get('exception_type', 'error')}: {detail.get('exception_message', '')}"
    text = text.strip()[:500]
    oom = "outofmemory" in text.lower().replace(" ", "")
    return TaskError(
        f"ComfyUI prompt {prompt_id} failed in node {detail.get('node_id', '?')}: {text}",
        error_type="oom" if oom else "execution_error",
        details={"node_id": detail.get("node_id"), "node_type": detail.get("node_type")},
    )


def _stop(session: requests.Session, base: str, prompt_id: str) -> None:
    """Drop the prompt from the queue and interrupt it if it runs.

    ComfyUI interrupts only the named prompt when given ``prompt_id``; older versions
    ignore the body and interrupt whatever runs, which is still the right trade when a
    runaway prompt would hold the GPU.
    """
    for path, body in (
        ("/queue", {"delete": [prompt_id]}),
        ("/interrupt", {"prompt_id": prompt_id}),
    ):
        # Best effort: the attempt is ending anyway.
        with contextlib.suppress(requests.RequestException):
            session.post(f"{base}{path}", json=body, timeout=(2.0, 5.0))


def _download(session: requests.Session, base: str, entry: dict, output_dir: Path) -> list[str]:
    saved: list[str] = []
    for node_output in (entry.get("outputs") or {}).values():
        for image in node_output.get("images", []):
            params = {
                "filename": image["filename"],
                "subfolder": image.get("subfolder", ""),
                "type": image.get("type", "output"),
            }
            response = session.get(f"{base}/view", params=params, timeout=_REQUEST_TIMEOUT)
            response.raise_for_status()
            name = _unique_name(output_dir, Path(image["filename"]).name)
            (output_dir / name).write_bytes(response.content)
            saved.append(name)
    return saved


def _unique_name(output_dir: Path, name: str) -> str:
    """Keep the server's file name (never its directories) without overwriting."""
    candidate, stem, suffix, index = name, Path(name).stem, Path(name).suffix, 1
    while (output_dir / candidate).exists():
        candidate = f"{stem}_{index}{suffix}"
        index += 1
    return candidate
