"""A CPU worker's stable name from its Compose slot, read by the worker (which asks Docker's
DNS for its container's name, ``airig/worker/naming.py``) and by ``triage`` on the host
(which has the container's name from the engine): both sides must agree, so one rule."""

from __future__ import annotations

import re


def slot_of(container_dns_name: str, service: str) -> str | None:
    """``airig-agents-worker-cpu-2.ai-network`` + ``worker-cpu`` → ``cpu-2``. A compose
    project or service name holds no dot, so the container name ends at the first one."""
    container = container_dns_name.split(".", 1)[0]
    match = re.fullmatch(rf".+-{re.escape(service)}-(\d+)", container)
    if match is None:
        return None
    return f"{service.removeprefix('worker-')}-{match[1]}"
