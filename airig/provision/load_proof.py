"""Ollama's second proof step: the smallest pulled model loads with its weights on the GPU.

A pull proves the bytes; only a model load proves the image runs on this GPU ("device
kernel image is invalid" and the like appear only then). ``load_proof`` loads the
smallest configured model with one token, asks ``/api/ps`` where its weights went
(``size_vram`` > 0: on the GPU), and unloads it so the GPU is free for the workers'
Ollamas. Every answer, however hostile, becomes one verdict dict; never a traceback.

The API shapes, from ollama/ollama docs/api.md (commit fb30760996871fa9460115c753afd2c60d4ab0f7):

- ``GET /api/tags``: ``{"models": [{"name", "size", ...}]}`` (lines 1380-1430);
- ``POST /api/generate``: ``model``, ``prompt``, ``options`` (``num_predict``), ``stream``
  false = one JSON object, ``keep_alive`` (lines 34-58, 390); an empty prompt with
  ``keep_alive`` 0 unloads the model (lines 457-466), an embedding model too: server/routes.go
  GenerateHandler expires the runner (lines 404-405) before it asks for the completion
  capability, whose absence is 400 ``"%q does not support generate"`` (lines 467-468);
- ``POST /api/embed``: ``model``, ``input`` (lines 1688-1699);
- ``GET /api/ps``: ``{"models": [{"name", "model", "size", "size_vram", ...}]}``
  (lines 1763-1800; server/routes.go PsHandler names them DisplayShortest, line 2271);
- a load that fails is ``{"error": err.Error()}`` with HTTP 500 (server/routes.go
  handleScheduleError, lines 3107-3118).
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from airig.common.ollama_names import OllamaName

# Connect fast; a load may read gigabytes from disk before the one token comes.
LOAD_TIMEOUT = (10.0, 600.0)
SAID_LIMIT = 300
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
# Ollama's refusal of a generate request to an embedding-only model (routes.go line 468).
NO_GENERATE = "does not support generate"


class Response(Protocol):
    status_code: int

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class Http(Protocol):
    """What ``load_proof`` needs of a ``requests.Session``."""

    def get(self, url: str, *, timeout: Any) -> Any: ...

    def post(self, url: str, *, json: Any, timeout: Any) -> Any: ...


class Refused(Exception):
    """One step's failure, worded for ``said``."""


def clip(text: str) -> str:
    """Ollama's words as they came, NUL removed, at most SAID_LIMIT characters."""
    return text.replace("\x00", "")[:SAID_LIMIT]


def verdict(status: str, model: str | None, size_vram: int | None, said: str) -> dict[str, Any]:
    return {"status": status, "model": model, "size_vram": size_vram, "said": clip(said)}


def display(name: str) -> str:
    """The name as /api/tags and /api/ps print it (``nomic-embed-text`` → ``…:latest``)."""
    try:
        return OllamaName.parse(name).display
    except Exception:  # noqa: BLE001 - a name Ollama itself sent may be anything
        return str(name).strip()


def load_proof(
    base_url: str, models: list[str], http: Http, timeout: Any = LOAD_TIMEOUT
) -> dict[str, Any]:
    """``{"status": passed|failed|skipped, "model", "size_vram", "said"}``."""
    if not models:
        return verdict(SKIPPED, None, None, "no models configured (AIRIG_OLLAMA_MODELS)")
    url = base_url.rstrip("/")
    model: str | None = None
    try:
        model = smallest(url, models, http, timeout)
        try:
            how = load(url, model, http, timeout)
            size_vram, size = placement(url, model, http, timeout)
        finally:
            unload(url, model, http, timeout)
    except Refused as exc:
        return verdict(FAILED, model, None, str(exc))
    except Exception as exc:  # noqa: BLE001 - the edge: any answer is one verdict
        return verdict(FAILED, model, None, f"no usable answer from Ollama at {url}: {_kind(exc)}")
    if size_vram is None or isinstance(size_vram, bool) or not isinstance(size_vram, int):
        return verdict(FAILED, model, None, f"/api/ps gave no size_vram for {model}: {size_vram!r}")
    where = f"/api/ps size_vram {size_vram} of size {size}"
    if size_vram <= 0:
        return verdict(FAILED, model, size_vram, f"weights not on the GPU: {where} ({how})")
    return verdict(PASSED, model, size_vram, f"{how}; {where}")


def _kind(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _json(response: Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError:
        text = " ".join((response.text or "").split())
        raise Refused(f"{what}: HTTP {response.status_code}, not JSON: {clip(text)!r}") from None


def _refusal(response: Response) -> str:
    """Ollama's error text exactly when it sent one, else the status and the body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    text = " ".join((response.text or "").split())
    return f"HTTP {response.status_code}" + (f": {text}" if text else "")


def _models_of(body: Any, what: str) -> list[dict]:
    rows = body.get("models") if isinstance(body, dict) else None
    if not isinstance(rows, list):
        raise Refused(f"{what}: no models list in the answer")
    return [row for row in rows if isinstance(row, dict)]


def _names(row: dict) -> set[str]:
    return {display(row[key]) for key in ("name", "model") if isinstance(row.get(key), str)}


def smallest(url: str, models: list[str], http: Http, timeout: Any) -> str:
    """The smallest configured model ``/api/tags`` lists (its size on disk); ties: the
    first configured."""
    response = http.get(f"{url}/api/tags", timeout=timeout)
    if response.status_code != 200:
        raise Refused(f"/api/tags: {_refusal(response)}")
    sizes: dict[str, int] = {}
    for row in _models_of(_json(response, "/api/tags"), "/api/tags"):
        size = row.get("size")
        if isinstance(size, int) and not isinstance(size, bool):
            for name in _names(row):
                sizes.setdefault(name, size)
    pulled = [
        (sizes[display(m)], i, display(m)) for i, m in enumerate(models) if display(m) in sizes
    ]
    if not pulled:
        listed = ", ".join(sorted(sizes)) or "nothing"
        raise Refused(f"none of {', '.join(models)} is in /api/tags (it lists {listed})")
    return min(pulled)[2]


def load(url: str, model: str, http: Http, timeout: Any) -> str:
    """Load ``model`` with one token (an embedding-only model: one embedding); what it did."""
    body = {
        "model": model,
        "prompt": "1",
        "stream": False,
        "options": {"num_predict": 1},
        "keep_alive": "60s",
    }
    response = http.post(f"{url}/api/generate", json=body, timeout=timeout)
    if response.status_code == 200:
        _answered(response, "/api/generate")
        return f"{model} answered one token"
    said = _refusal(response)
    if NO_GENERATE not in said:
        raise Refused(said)
    embed = {"model": model, "input": "1", "keep_alive": "60s"}
    response = http.post(f"{url}/api/embed", json=embed, timeout=timeout)
    if response.status_code != 200:
        raise Refused(_refusal(response))
    _answered(response, "/api/embed")
    return f"{model} (embedding only) answered one embedding"


def _answered(response: Response, what: str) -> None:
    """A 200 is an answer only as a JSON object without an ``error`` key."""
    body = _json(response, what)
    if not isinstance(body, dict):
        raise Refused(f"{what}: HTTP 200 but not a JSON object: {clip(repr(body))}")
    if isinstance(body.get("error"), str):
        raise Refused(str(body["error"]))


def placement(url: str, model: str, http: Http, timeout: Any) -> tuple[object, object]:
    """``(size_vram, size)`` of ``model`` in ``/api/ps``."""
    response = http.get(f"{url}/api/ps", timeout=timeout)
    if response.status_code != 200:
        raise Refused(f"/api/ps: {_refusal(response)}")
    for row in _models_of(_json(response, "/api/ps"), "/api/ps"):
        if model in _names(row):
            return row.get("size_vram"), row.get("size")
    raise Refused(f"{model} answered but /api/ps does not list it loaded")


def unload(url: str, model: str, http: Http, timeout: Any) -> None:
    """Free the GPU for the workers' Ollamas; a failure here changes no verdict."""
    with contextlib.suppress(Exception):
        http.post(f"{url}/api/generate", json={"model": model, "keep_alive": 0}, timeout=timeout)
