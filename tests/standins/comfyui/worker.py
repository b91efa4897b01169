"""Prompt queue and execution worker of the ComfyUI stand-in.

History entries have ComfyUI's shape: {"prompt": [number, id, graph, extra, outputs],
"outputs": {node_id: {"images": [{filename, subfolder, type}]}}, "status": {status_str,
completed, messages}, "meta": {...}}; /history/<id> is {} until the run finished.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid
import zlib
from pathlib import Path

PNG_SIDE = 8


def tiny_png(seed: int) -> bytes:
    """A valid 8x8 RGB PNG whose colour depends on the seed (zlib + struct: stdlib only)."""
    colour = bytes(((seed >> shift) & 0xFF) for shift in (0, 8, 16))
    raw = b"".join(b"\x00" + colour * PNG_SIDE for _ in range(PNG_SIDE))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", PNG_SIDE, PNG_SIDE, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _seed_of(graph: dict) -> int:
    for node in graph.values():
        seed = (node.get("inputs") or {}).get("seed")
        if isinstance(seed, int):
            return seed
    return 0


def _checkpoints(graph: dict) -> set[str]:
    return {str((n.get("inputs") or {}).get("ckpt_name")) for n in graph.values()}


class PromptQueue:
    def __init__(self, output_dir: Path, exec_seconds: float):
        self.output_dir = output_dir
        self.exec_seconds = exec_seconds
        self.free_requests: list[object] = []
        self._pending: list[list] = []
        self._running: list | None = None
        self._history: dict[str, dict] = {}
        self._counter = 0
        self._cond = threading.Condition()
        self._interrupt = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="prompt-worker", daemon=True).start()

    def put(self, graph: dict, extra: dict, outputs: list[str], prompt_id: str | None):
        with self._cond:
            prompt_id = prompt_id or str(uuid.uuid4())
            number = self._counter
            self._counter += 1
            self._pending.append([number, prompt_id, graph, extra, outputs])
            self._cond.notify()
            return prompt_id, number

    def snapshot(self) -> dict:
        with self._cond:
            running = [self._running] if self._running else []
            return {"queue_running": running, "queue_pending": list(self._pending)}

    def history(self, prompt_id: str | None = None) -> dict:
        with self._cond:
            if prompt_id is None:
                return dict(self._history)
            entry = self._history.get(prompt_id)
            return {prompt_id: entry} if entry else {}

    def interrupt(self) -> None:
        self._interrupt.set()

    def edit(self, body: dict) -> None:
        """POST /queue: {"clear": true} and/or {"delete": [prompt ids]}."""
        with self._cond:
            doomed = set(body.get("delete") or [])
            self._pending = [] if body.get("clear") else self._pending
            self._pending = [item for item in self._pending if item[1] not in doomed]

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                self._running = self._pending.pop(0)
                self._interrupt.clear()
            entry = self._execute(self._running)
            with self._cond:
                self._history[self._running[1]] = entry
                self._running = None

    def _execute(self, item: list) -> dict:
        number, prompt_id, graph, _extra, outputs = item
        started = int(time.time() * 1000)
        messages: list = [["execution_start", {"prompt_id": prompt_id, "timestamp": started}]]
        entry = {"prompt": item, "outputs": {}, "meta": {}}
        interrupted = self._interrupt.wait(self.exec_seconds)
        failing = {s for s in os.environ.get("STANDIN_FAIL_EXECUTION", "").split(",") if s}
        if interrupted or _checkpoints(graph) & failing:
            kind = "execution_interrupted" if interrupted else "execution_error"
            detail = {
                "prompt_id": prompt_id,
                "node_id": outputs[0],
                "executed": [],
                "exception_message": "stand-in failure",
                "exception_type": "RuntimeError",
                "timestamp": int(time.time() * 1000),
            }
            messages.append([kind, detail])
            entry["status"] = {"status_str": "error", "completed": False, "messages": messages}
            return entry
        for node_id in outputs:
            node = graph[node_id]
            if node["class_type"] == "SaveImage":
                image = self._save(node, _seed_of(graph) + number)
                entry["outputs"][node_id] = {"images": [image]}
            entry["meta"][node_id] = {
                "node_id": node_id,
                "display_node": node_id,
                "parent_node": None,
                "real_node_id": node_id,
            }
        messages.append(
            ["execution_success", {"prompt_id": prompt_id, "timestamp": int(time.time() * 1000)}]
        )
        entry["status"] = {"status_str": "success", "completed": True, "messages": messages}
        return entry

    def _save(self, node: dict, seed: int) -> dict:
        """Write <prefix>_<counter:05>_.png as SaveImage does; prefix may hold a subfolder."""
        prefix = str((node.get("inputs") or {}).get("filename_prefix") or "ComfyUI")
        subfolder, _, stem = prefix.rpartition("/")
        folder = self.output_dir / subfolder
        folder.mkdir(parents=True, exist_ok=True)
        counter = 1 + sum(1 for _ in folder.glob(f"{stem}_*_.png"))
        filename = f"{stem}_{counter:05}_.png"
        (folder / filename).write_bytes(tiny_png(seed))
        return {"filename": filename, "subfolder": subfolder, "type": "output"}
