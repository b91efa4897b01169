"""Fixture hosts for the hardware tests: a fake sysfs and /dev tree, NVML and Docker.

The fakes follow the real interfaces (pynvml functions, the docker SDK's ``info()``,
``images.get``, ``containers.run/get`` and its exceptions); a test checks the NVML names
against the installed pynvml so the fake cannot drift.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.errors import APIError, DockerException, ImageNotFound, NotFound

GIB = 1024**3
PROBE_IMAGE = "airig-test/base:bookworm"


class FakeHost:
    """A sysfs root and a /dev root under tmp_path."""

    def __init__(self, root: Path) -> None:
        self.sys = root / "sys"
        self.dev = root / "dev"
        (self.sys / "bus" / "pci" / "devices").mkdir(parents=True)
        self.dev.mkdir()

    def pci(
        self,
        address: str,
        vendor: int,
        device: int,
        pci_class: int = 0x030000,
        driver: str | None = None,
        vram: int | None = None,
        vram_used: int | None = None,
        subsystem: tuple[int, int] | None = None,
    ) -> FakeHost:
        path = self.sys / "bus" / "pci" / "devices" / address
        path.mkdir()
        (path / "vendor").write_text(f"0x{vendor:04x}\n")
        (path / "device").write_text(f"0x{device:04x}\n")
        if subsystem is not None:  # the board maker's ids, as sysfs spells them
            (path / "subsystem_vendor").write_text(f"0x{subsystem[0]:04x}\n")
            (path / "subsystem_device").write_text(f"0x{subsystem[1]:04x}\n")
        (path / "class").write_text(f"0x{pci_class:06x}\n")
        if driver:
            target = self.sys / "bus" / "pci" / "drivers" / driver
            target.mkdir(parents=True, exist_ok=True)
            (path / "driver").symlink_to(target)
        if vram is not None:
            (path / "mem_info_vram_total").write_text(f"{vram}\n")
        if vram_used is not None:
            (path / "mem_info_vram_used").write_text(f"{vram_used}\n")
        return self

    def kfd_node(self, number: int, **props: int) -> FakeHost:
        node = self.sys / "class" / "kfd" / "kfd" / "topology" / "nodes" / str(number)
        node.mkdir(parents=True)
        (node / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items()))
        return self

    def dev_node(self, relative: str, gid: int) -> Path:
        """A regular file standing in for a device node; owned by ``gid`` when we may."""
        path = self.dev / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        if os.geteuid() == 0:
            os.chown(path, -1, gid)
        return path

    def amd_nodes(
        self, render: tuple[str, ...] = ("renderD128",), kfd_gid: int = 109, render_gid: int = 109
    ) -> FakeHost:
        """ROCm's device nodes. The defaults are the common Ubuntu layout: /dev/kfd and the
        render nodes both belong to `render`; some hosts give /dev/kfd another group."""
        self.dev_node("kfd", kfd_gid)
        self.dev_node("dri/card0", 44)
        for name in render:
            self.dev_node(f"dri/{name}", render_gid)
        return self


# ------------------------------------------------------------------ pci.ids
# A few lines in the real database's format, with its traps: comments inside sections, a
# device id equal to a vendor's id, one device id under two vendors, the class list last.
PCI_IDS = """\
#
#\tList of PCI ID's (a test fixture, not the real database)
#
0001  SafeNet (wrong ID)
0010  Allied Telesis, Inc (Wrong ID)
# This is a relabelled RTL-8139
\t8139  AT-2500TX V3 Ethernet
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t1638  Cezanne [Radeon Vega Series / Radeon Vega Mobile Series]
\t73bf  Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]
\t\t1002 0e3a  Radeon RX 6900 XT
\t\t1da2 e438  Radeon RX 6800 XT Nitro+ SE
\t744c  Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]
#\t\t1002 0000  a commented-out entry
\t\t1002 0e3b  Radeon RX 7900 GRE
\t\t1da2 471e  NITRO+ RX 7900 XTX Vapor-X
1003  ULSI Systems
\t0201  US201
\t744c  not AMD's 744c
10de  NVIDIA Corporation
\t1002  not AMD: an NVIDIA device id
\t1c03  GP106 [GeForce GTX 1060 6GB]
\t\t1043 85ac  GeForce GTX 1060 6GB
\t2504  GA106 [GeForce RTX 3060 Lite Hash Rate]
8086  Intel Corporation
\t4680  AlderLake-S GT1 [UHD Graphics 770]
\t56a0  DG2 [Arc A770]
C 03  Display controller
\t00  VGA compatible controller
\t\t00  VGA controller
"""


def write_pci_ids(path: Path, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(PCI_IDS.encode()) if gz else PCI_IDS.encode())
    return path


# ------------------------------------------------------------------ NVML
class FakeNVMLError(Exception):
    MESSAGES = {3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found"}

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self.MESSAGES.get(self.value, f"NVML error {self.value}")


@dataclass
class FakeCard:
    name: str
    bus_id: str  # NVML style: 8-digit domain
    total: int
    free: int
    capability: tuple[int, int]
    temperature: int | None = 45
    power_mw: int | None = 120_500
    utilization: int | None = 7


@dataclass
class _Struct:
    total: int = 0
    free: int = 0
    busId: bytes = b""  # NVML's field name
    gpu: int = 0


@dataclass
class FakeNvml:
    """The subset of pynvml that airig calls."""

    cards: list[FakeCard] = field(default_factory=list)
    init_error: int | None = None
    driver: str = "550.54.14"
    shutdowns: int = 0

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_TEMPERATURE_GPU = 0

    def nvmlInit(self) -> None:  # pynvml names, hence camelCase
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeCard:
        return self.cards[index]

    def nvmlDeviceGetName(self, card: FakeCard) -> str:
        return card.name

    def nvmlDeviceGetMemoryInfo(self, card: FakeCard) -> _Struct:
        return _Struct(total=card.total, free=card.free)

    def nvmlDeviceGetPciInfo(self, card: FakeCard) -> _Struct:
        return _Struct(busId=card.bus_id.encode())

    def nvmlDeviceGetCudaComputeCapability(self, card: FakeCard) -> tuple[int, int]:
        return card.capability

    def nvmlDeviceGetTemperature(self, card: FakeCard, sensor: int) -> int:
        return _supported(card.temperature)

    def nvmlDeviceGetPowerUsage(self, card: FakeCard) -> int:
        return _supported(card.power_mw)

    def nvmlDeviceGetUtilizationRates(self, card: FakeCard) -> _Struct:
        return _Struct(gpu=_supported(card.utilization))


def _supported(value: Any) -> Any:
    if value is None:
        raise FakeNVMLError(FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    return value


NVML_API = [name for name in vars(FakeNvml) if name.startswith(("nvml", "NVML"))]


def gtx1060(bus: int) -> FakeCard:
    return FakeCard(
        "NVIDIA GeForce GTX 1060 6GB", f"00000000:{bus:02X}:00.0", 6 * GIB, 5 * GIB, (6, 1)
    )


def rtx3060(bus: int) -> FakeCard:
    return FakeCard(
        "NVIDIA GeForce RTX 3060", f"00000000:{bus:02X}:00.0", 12 * GIB, 11 * GIB, (8, 6)
    )


# ------------------------------------------------------------------ Docker
class FakeContainer:
    def __init__(self, engine: FakeDocker, name: str) -> None:
        self.engine, self.name = engine, name

    def remove(self, force: bool = False) -> None:
        self.engine.removed.append(self.name)

    # a detached run (the Vulkan probe): exit code and output from ``engine.detached``
    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        return {"StatusCode": self.engine.detached[0]}

    def logs(self, stdout: bool = True, stderr: bool = True) -> bytes:
        _, out, err = self.engine.detached
        return ((out if stdout else "") + (err if stderr else "")).encode()


class FakeContainers:
    def __init__(self, engine: FakeDocker) -> None:
        self.engine = engine

    def run(self, image: str, command: list[str] | None = None, **kwargs: Any) -> Any:
        self.engine.runs.append({"image": image, "command": command, **kwargs})
        if self.engine.run_error is not None:
            self.engine.left_behind.add(kwargs["name"])
            raise APIError("500 Server Error", explanation=self.engine.run_error)
        if kwargs.get("detach"):
            return FakeContainer(self.engine, kwargs["name"])
        return b""

    def get(self, name: str) -> FakeContainer:
        if name not in self.engine.left_behind:
            raise NotFound(f"No such container: {name}")
        return FakeContainer(self.engine, name)

    def list(self, **kwargs: Any) -> list[FakeContainer]:
        return []  # nothing of airig's is running (the launcher's own-ports query)


class FakeApi:
    """The low-level client's container list (``docker.api.containers``): raw summaries."""

    def __init__(self, engine: FakeDocker) -> None:
        self.engine = engine

    def containers(self, **kwargs: Any) -> list[dict[str, Any]]:
        return list(self.engine.listed)  # nothing of airig's runs unless a test says so


class FakeImages:
    def __init__(self, engine: FakeDocker) -> None:
        self.engine = engine

    def get(self, name: str) -> object:
        if name not in self.engine.images_present:
            raise ImageNotFound(f"No such image: {name}")
        return object()


class FakeDocker:
    """``info()``, ``images.get`` and ``containers.run/get`` of docker.DockerClient."""

    def __init__(
        self,
        info: dict[str, Any] | None = None,
        run_error: str | None = None,
        images: tuple[str, ...] = (PROBE_IMAGE,),
        down: bool = False,
        detached: tuple[int, str, str] = (0, "", ""),
    ) -> None:
        self._info = info if info is not None else {"Runtimes": {"runc": {"path": "runc"}}}
        self.run_error = run_error
        self.detached = detached  # (exit code, stdout, stderr) of a detached run
        self.images_present = set(images)
        self.down = down
        self.runs: list[dict[str, Any]] = []
        self.removed: list[str] = []
        self.left_behind: set[str] = set()
        self.containers = FakeContainers(self)
        self.images = FakeImages(self)
        self.listed: list[dict[str, Any]] = []  # what api.containers() answers
        self.api = FakeApi(self)

    def info(self) -> dict[str, Any]:
        if self.down:
            raise DockerException("Error while fetching server API version: connection refused")
        return self._info


NVIDIA_ENGINE_ERROR = 'could not select device driver "nvidia" with capabilities: [[gpu]]'
