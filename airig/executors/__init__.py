"""Task executors (run on workers) and payload schemas (used by the brain too).

``airig.common.task_types`` (the table of types) and ``task_schemas`` need only
pydantic. The runtime names below are loaded on first use, so importing this package
does not import the HTTP clients.
"""

from __future__ import annotations

import importlib
from typing import Any

from airig.common.task_types import DEFAULT_CLASS_FOR_TYPE, PAYLOAD_SCHEMAS

# name -> module that defines it; only "base" imports the HTTP clients.
_LAZY = {
    "ExecContext": "airig.executors.context",
    "ExecResult": "airig.executors.context",
    "TaskError": "airig.executors.context",
    "EXECUTORS": "airig.executors.base",
    "run_task": "airig.executors.base",
    "validate_payload": "airig.executors.base",
}

__all__ = ["DEFAULT_CLASS_FOR_TYPE", "PAYLOAD_SCHEMAS", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'airig.executors' has no attribute {name!r}")
