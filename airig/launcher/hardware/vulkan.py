"""Does Vulkan see the GPUs inside a container? (issue 28 §1)

Mapping ``/dev/dri`` into a container proves only that the engine accepted the nodes. The
Vulkan runner needs more: a Mesa driver in the image for the card (RADV for AMD, ANV for
Intel), a kernel driver that answers on the render node, and read-write access to it. When
any of these is missing, the Vulkan loader still finds Mesa's software renderer (llvmpipe,
``deviceType = PHYSICAL_DEVICE_TYPE_CPU``) or no driver at all, and Ollama silently runs
every model on the CPU. So, before Ollama's backend is settled, the launcher runs
``vulkaninfo --summary`` in the very image Ollama will run, with the render nodes and
groups its containers get, and reads the device list.

``vulkaninfo --summary`` (Vulkan-Tools; the kit's image installs Ubuntu's ``vulkan-tools``)
prints, under ``Devices:``, one block per physical device::

    GPU0:
        apiVersion         = 1.3.230
        vendorID           = 0x1002
        deviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
        deviceName         = AMD Radeon RX 580 Series (RADV POLARIS10)
        driverName         = radv

With no driver it exits non-zero after "Cannot create Vulkan instance." (the loader's
``vkCreateInstance: Found no drivers!``). Both shapes were recorded from Debian's
vulkan-tools 1.3.239 (tests/unit/launcher/fixtures/vulkaninfo/).

The probe never pulls: the image must be local (`up` builds it first). It labels its
container and removes it however the run ends; a timeout is a finding, never a crash.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from docker.errors import APIError, DockerException, ImageNotFound
from requests.exceptions import RequestException

from airig.launcher.compose.docker import one_off
from airig.launcher.hardware.docker_gpu import engine_message

VULKANINFO = ["vulkaninfo", "--summary"]
# Vulkan's VkPhysicalDeviceType names that are a GPU; PHYSICAL_DEVICE_TYPE_CPU is llvmpipe
GPU_TYPES = {
    "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU": "discrete",
    "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU": "integrated",
    "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU": "virtual",
}
# PCI vendor IDs as vulkaninfo prints them (lower case hex)
VENDOR_IDS = {"amd": 0x1002, "intel": 0x8086, "nvidia": 0x10DE}
VENDOR_NAMES = {"amd": "AMD", "intel": "Intel", "nvidia": "NVIDIA"}
NO_INSTANCE = "Cannot create Vulkan instance"
_DEVICE_HEADER = re.compile(r"^GPU(\d+):\s*$")
_FIELD = re.compile(r"^\s+(\w+)\s*=\s*(.*?)\s*$")


@dataclass(frozen=True)
class VulkanDevice:
    """One physical device of ``vulkaninfo --summary``."""

    name: str
    device_type: str  # PHYSICAL_DEVICE_TYPE_…
    vendor_id: int | None = None
    driver: str = ""  # driverName: radv, anv (Intel), llvmpipe, nvidia …

    @property
    def is_gpu(self) -> bool:
        return self.device_type in GPU_TYPES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_summary(text: str) -> list[VulkanDevice]:
    """The devices of a ``vulkaninfo --summary`` output, in its order."""
    devices: list[dict[str, str]] = []
    in_devices = False
    for line in text.splitlines():
        if line.strip() == "Devices:":
            in_devices = True
            continue
        if not in_devices:
            continue
        if _DEVICE_HEADER.match(line):
            devices.append({})
            continue
        found = _FIELD.match(line)
        if found and devices:
            devices[-1][found.group(1)] = found.group(2)
    return [_device(fields) for fields in devices]


def _device(fields: dict[str, str]) -> VulkanDevice:
    vendor = fields.get("vendorID", "")
    try:
        vendor_id: int | None = int(vendor, 16)
    except ValueError:
        vendor_id = None
    return VulkanDevice(
        fields.get("deviceName", "?"),
        fields.get("deviceType", "?"),
        vendor_id,
        fields.get("driverName", ""),
    )


@dataclass(frozen=True)
class VulkanProbe:
    """passed (every render node given shows as a GPU of the vendor) | failed | not run."""

    status: str
    detail: str
    image: str | None = None
    devices: tuple[VulkanDevice, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["devices"] = [d.to_dict() for d in self.devices]
        return data


def judge(
    vendor: str, nodes: Sequence[str], exit_code: int, stdout: str, stderr: str, image: str
) -> VulkanProbe:
    """The verdict on one ``vulkaninfo --summary`` run in ``image`` given ``nodes``."""
    devices = tuple(parse_summary(stdout))
    wanted = VENDOR_IDS.get(vendor)
    gpus = [d for d in devices if d.is_gpu and (wanted is None or d.vendor_id == wanted)]
    if exit_code != 0 and not devices:
        said = NO_INSTANCE if NO_INSTANCE in stdout + stderr else _last_line(stderr or stdout)
        detail = f"vulkaninfo exited {exit_code} in {image}: {said}"
        return VulkanProbe("failed", detail, image)
    if len(gpus) >= len(nodes) and gpus:
        names = ", ".join(f"{d.name} ({d.driver or '?'})" for d in gpus)
        return VulkanProbe("passed", f"Vulkan in the container sees {names}", image, devices)
    listed = ", ".join(f"{d.name} ({_type_words(d)})" for d in devices) or "no device"
    detail = (
        f"Vulkan in the container sees {len(gpus)} {VENDOR_NAMES.get(vendor, vendor)} GPU(s) for "
        f"{len(nodes)} render node(s) ({', '.join(nodes)}); it lists {listed}"
    )
    return VulkanProbe("failed", detail, image, devices)


def _type_words(device: VulkanDevice) -> str:
    if device.device_type == "PHYSICAL_DEVICE_TYPE_CPU":
        return "a CPU renderer"
    return GPU_TYPES.get(device.device_type, device.device_type)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def run_probe(
    client: Any,
    image: str,
    vendor: str,
    nodes: Sequence[str],
    gids: Sequence[int] = (),
    timeout: float = 60.0,
) -> VulkanProbe:
    """``vulkaninfo --summary`` in ``image`` with ``nodes`` (host paths, mapped to the same
    path inside, as compose maps them) and ``gids`` added, as Ollama's container gets them."""
    try:
        client.images.get(image)
    except ImageNotFound:
        return VulkanProbe("not run", f"the image {image} is not built yet", image)
    except (DockerException, RequestException) as exc:
        return VulkanProbe("not run", f"Docker not reachable: {exc}", image)
    try:
        # the entrypoint: the Ollama image's ENTRYPOINT is /bin/ollama
        with one_off(
            client, image, "airig-vulkan-probe", f"vulkan-{vendor}", entrypoint=VULKANINFO,
            devices=[f"{node}:{node}:rwm" for node in nodes],
            group_add=[str(gid) for gid in gids], detach=True,
        ) as container:  # fmt: skip
            exit_code = int(container.wait(timeout=timeout).get("StatusCode", -1))
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return judge(vendor, nodes, exit_code, stdout, stderr, image)
    except APIError as exc:
        message = engine_message(exc)
        if "executable file not found" in message:
            detail = f"the image {image} has no vulkaninfo (install vulkan-tools in it)"
            return VulkanProbe("not run", detail, image)
        return VulkanProbe("failed", message, image)
    except RequestException as exc:  # a wait past ``timeout`` is a ReadTimeout
        return VulkanProbe("failed", f"vulkaninfo did not finish in {timeout:.0f} s: {exc}", image)
    except DockerException as exc:
        return VulkanProbe("failed", str(exc), image)
