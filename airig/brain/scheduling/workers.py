"""What a claiming worker is, as the scheduler sees it, and which classes it may claim.

The claim order itself (resource tasks, max wait, residency, aged priority, FIFO) is
``residency.choose``; this module holds only the worker's side of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WorkerView:
    classes: tuple[str, ...]
    resident_models: frozenset[str] = field(default_factory=frozenset)
    # False for a worker of a rig joined with an untrusted token: no sensitive task
    trusted: bool = True
    # True for this machine's workers (the bootstrap token): they use the compute services
    # the brain probes, so a service down holds its tasks back from them (placement.py)
    local: bool = True


def eligible_classes(worker_classes: Iterable[str]) -> set[str]:
    """Classes a worker may claim: its own, plus resource tasks when it serves LLMs."""
    classes = set(worker_classes)
    if "llm" in classes:
        classes.add("resource")
    return classes
