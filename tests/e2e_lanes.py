"""Lanes of e2e kits: the modules of tests/e2e/ in two queues that run side by side on one
Docker engine, each on an xdist worker of its own (tests/conftest.py's scheduler).

A kit spends most of its minutes waiting (pulls, health checks, timers), so one queue of
every kit left the CPU half idle while it was the whole run's critical path. Two kits run
at once when nothing of theirs meets: each lane has its own Compose project prefix (its
containers, volumes and rig lock: airig/launcher/lifecycle/rig_lock.py), network, host
ports, and its own name for the test registry (`127.0.0.1:PORT` or `localhost:PORT`, the
same registry): `force_clean` untags what its own lane pulled, never an image the other
lane's `up` is about to start. Lane "a" is the kit as a user runs it, every default kept.

A module's lane is its entry in ``MODULE_LANE`` (default "a"); a module reads its lane at
import (``LANE = lane_for(__file__)``) for its URLs and container names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The kit's default host ports (.env.example), which lane "a" keeps.
DEFAULT_PORTS = {
    "BRAIN_PORT": 8080,
    "FILES_PORT": 8090,
    "COMFYUI_PORT": 8188,
    "OLLAMA_PORT": 11434,
    "WHISPER_PORT": 8000,
}


@dataclass(frozen=True)
class Lane:
    name: str
    prefix: str  # AIRIG_PROJECT_PREFIX: projects <prefix>-infra, -compute, -agents
    network: str  # AIRIG_NETWORK
    registry_host: str  # the host part of AIRIG_IMAGE_REGISTRY (the port is the registry's)
    ports: dict[str, int] = field(default_factory=dict)  # host ports other than the defaults

    def port(self, key: str) -> int:
        return self.ports.get(key, DEFAULT_PORTS[key])

    def url(self, key: str) -> str:
        """``http://127.0.0.1:<port>`` of a service's host port (BRAIN_PORT, FILES_PORT…)."""
        return f"http://127.0.0.1:{self.port(key)}"

    def project(self, stack: str) -> str:
        return f"{self.prefix}-{stack}"

    def container(self, stack: str, service: str, index: int = 1) -> str:
        return f"{self.prefix}-{stack}-{service}-{index}"

    def env(self) -> dict[str, str]:
        """The .env values that put a kit in this lane (the registry is added by the caller)."""
        values = {"AIRIG_PROJECT_PREFIX": self.prefix, "AIRIG_NETWORK": self.network}
        return values | {key: str(port) for key, port in self.ports.items()}


LANES = {
    "a": Lane("a", "airig", "ai-network", "127.0.0.1"),
    # Ports below Linux's ephemeral range (32768-60999), where test_two_rigs and the unit
    # tests take theirs, so no free port another test asks the kernel for is one of these.
    "b": Lane(
        "b",
        "airigb",
        "airigb-net",
        "localhost",
        {
            "BRAIN_PORT": 28080,
            "FILES_PORT": 28090,
            "COMFYUI_PORT": 28188,
            "OLLAMA_PORT": 28434,
            "WHISPER_PORT": 28000,
        },
    ),  # fmt: skip
}

# Lane "b": modules whose kits need nothing of the kit's defaults, chosen so that the lanes
# take about as long (11-12 min each on a 2-core machine: benchmarks/README.md, "The suite
# a developer waits for").
MODULE_LANE = {
    "test_kit_blast_radius.py": "b",
    "test_kit_postgres.py": "b",
    "test_kit_pull.py": "b",
    "test_kit_up_down.py": "b",
    "test_kit_workloads.py": "b",
    # its own prefixes, network and ports, but the registry name of lane "b": lane "a"'s
    # force_clean would untag its images between its pull and its create
    "test_two_rigs.py": "b",
}


# Modules that start no kit: they need the base, Vulkan and stand-in images only
# (tests/e2e/conftest.py `early_images`), which a fresh machine has minutes before the
# kit's own image. They run first in their lane (tests/conftest.py orders them), while the
# kits' modules of both lanes still wait for that image.
EARLY = ("test_kit_gpu_proofs.py", "test_kit_vulkan_probe.py", "test_standin_images.py")


def early_first(nodeids: list[str]) -> list[int]:
    """The order to run the e2e node ids in: those of ``EARLY`` modules first, each group
    in its own order (the indices into ``nodeids``)."""

    def late(index: int) -> bool:
        return Path(nodeids[index].split("::", 1)[0]).name not in EARLY

    return sorted(range(len(nodeids)), key=late)


def lane_for(module: str | Path) -> Lane:
    """The lane of the e2e module at ``module`` (a path or node id)."""
    name = Path(str(module).split("::", 1)[0]).name
    return LANES[MODULE_LANE.get(name, "a")]


E2E = "tests/e2e/"  # how their node ids start (relative to the checkout)


class Spans:
    """When each lane of kits and the rest of the tests ran (first setup to last teardown,
    wall clock): printed at the end of a run, so the lanes can be balanced by what they
    took on the machine that ran them, not by a guess."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float, int]] = {}

    def note(self, report: Any) -> None:  # a pytest.TestReport
        """Count ``report`` (any phase) in its lane's span or the rest's."""
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if start is None or stop is None:
            return
        if report.nodeid.startswith(E2E):
            name = f"lane {lane_for(report.nodeid).name}"
        else:
            name = "the rest"
        first, last, count = self.spans.get(name, (start, stop, 0))
        counted = count + (report.when == "call")
        self.spans[name] = (min(first, start), max(last, stop), counted)

    def lines(self) -> list[str]:
        def clock(at: float) -> str:
            return time.strftime("%H:%M:%S", time.localtime(at))

        return [
            f"{name}: {clock(first)}-{clock(last)} ({(last - first) / 60:.1f} min, {count} tests)"
            for name, (first, last, count) in sorted(self.spans.items())
        ]
