"""The AMD cards of a host in the order the launcher numbers them, read from sysfs alone.

Shared by both sides so they agree on what "GPU 1" is: the launcher's detection
(``launcher/hardware``: ``pci.py``, ``amd.py``) gives each usable AMD card a host index,
its position among them (``choice.gpu_slots``), and the worker (``worker/amd_sysfs.py``)
reads the VRAM of the cards its ``WORKER_GPU`` indexes name. The rule is ``host_order``,
the one function both call (the launcher on its detected cards, ``choice.profile_gpus``;
``amd_host_order`` on what it reads here): display-class (0x03) PCI functions of vendor
0x1002 in PCI address order, each kept only when the KFD topology lists it with a render
node, an integrated one (an APU: KFD node with CPU cores, or amdgpu's
``mem_info_vram_total`` at most 2 GiB) only with ``AIRIG_IGPU=on``.
``tests/unit/worker/test_amd_sysfs.py`` runs the launcher's detection and this on the
same fake trees.

Everything here reads sysfs only (no ROCm user space): files that are missing, not
numbers, links that loop, all read as "unknown", never raise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

AMD_VENDOR = 0x1002
DISPLAY_CLASS = 0x03
APU_VRAM_LIMIT = 2 * 1024**3
MAX_ATTRIBUTE_BYTES = 65536  # a sysfs attribute is at most one page (4 KiB, 64 KiB on arm64)


@dataclass(frozen=True)
class KfdNode:
    """One GPU node of /sys/class/kfd/kfd/topology/nodes."""

    gfx_target: str | None  # "gfx1030"
    pci_address: str | None
    render_node: str | None  # "renderD128"
    is_apu: bool  # the node has CPU cores as well as SIMDs


@dataclass(frozen=True)
class AmdCard:
    """One AMD card as the launcher numbers it: its position in ``amd_host_order`` is its
    host index."""

    pci_address: str
    render_node: str  # "renderD128", from the KFD topology
    integrated: bool


class AmdCandidate(Protocol):
    """What the rule reads of one AMD card: the launcher's ``GpuInfo`` has both, as does
    ``_Found`` here."""

    @property
    def render_node(self) -> str | None: ...

    @property
    def integrated(self) -> bool: ...


CardT = TypeVar("CardT", bound=AmdCandidate)


def host_order(cards: Iterable[CardT], igpu: bool) -> list[CardT]:
    """The rule both sides number AMD cards by. ``cards``: the host's AMD cards in PCI
    address order; kept: those the KFD topology gives a render node (one it does not list
    is bound to vfio-pci, or its amdgpu failed: guessing a node would map another card),
    an integrated one only with ``igpu`` (AIRIG_IGPU=on). A card's host index is its
    position in the result."""
    return [c for c in cards if c.render_node is not None and (igpu or not c.integrated)]


@dataclass(frozen=True)
class _Found:
    """One AMD display function as sysfs shows it, before the rule."""

    pci_address: str
    render_node: str | None  # None: the KFD topology does not list it
    integrated: bool


def amd_host_order(sysfs_root: Path, igpu: bool) -> list[AmdCard]:
    """The host's usable AMD cards, in the launcher's host-index order (``host_order``).
    KFD nodes with no PCI entry, which the launcher numbers after these, are left out: they
    have no sysfs files to read."""
    devices_dir = Path(sysfs_root) / "bus" / "pci" / "devices"
    nodes = {node.pci_address: node for node in read_kfd_nodes(Path(sysfs_root))}
    try:
        entries = sorted(devices_dir.iterdir())
    except OSError:
        return []
    found = []
    for device_dir in entries:
        class_code = read_hex(device_dir / "class")
        if class_code is None or class_code >> 16 != DISPLAY_CLASS:
            continue
        if read_hex(device_dir / "vendor") != AMD_VENDOR:
            continue
        address = normalize_address(device_dir.name)
        node = nodes.get(address)
        total = read_int(device_dir / "mem_info_vram_total")
        apu = node is not None and node.is_apu
        integrated = apu or (total is not None and total <= APU_VRAM_LIMIT)
        found.append(_Found(address, node.render_node if node else None, integrated))
    return [
        AmdCard(card.pci_address, card.render_node, card.integrated)
        for card in host_order(found, igpu)
        if card.render_node is not None  # host_order kept only these; said for the type
    ]


def read_kfd_nodes(sysfs_root: Path) -> list[KfdNode]:
    """GPU nodes (simd_count > 0) of the KFD topology; CPU-only nodes are skipped."""
    nodes_dir = sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    if not nodes_dir.is_dir():
        return []
    nodes = []
    for properties_file in sorted(nodes_dir.glob("*/properties")):
        props = parse_properties(read_text(properties_file) or "")
        if props.get("simd_count", 0) > 0:
            nodes.append(kfd_node(props))
    return nodes


def parse_properties(text: str) -> dict[str, int]:
    """KFD writes one "name value" pair of integers per line."""
    props = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            props[name] = int(value)
    return props


def kfd_node(props: dict[str, int]) -> KfdNode:
    location = props.get("location_id")
    address = None
    if location:  # (bus << 8) | (device << 3) | function
        bus, devfn = location >> 8, location & 0xFF
        address = f"{props.get('domain', 0):04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7:x}"
    minor = props.get("drm_render_minor")
    return KfdNode(
        gfx_target=gfx_target(props.get("gfx_target_version", 0)),
        pci_address=address,
        render_node=f"renderD{minor}" if minor else None,
        is_apu=props.get("cpu_cores_count", 0) > 0,
    )


def gfx_target(version: int) -> str | None:
    """KFD's decimal major*10000 + minor*100 + stepping → LLVM's "gfx" + major + hex digits."""
    if version <= 0:
        return None
    major, rest = divmod(version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


def normalize_address(address: str) -> str:
    """One spelling for sysfs and NVML: NVML writes "00000000:01:00.0", sysfs "0000:01:00.0".

    The domain is read as a number, not cut to 4 digits: behind Intel VMD it is wider
    (sysfs "10000:e1:00.0", NVML "00010000:E1:00.0"), and cutting it would make one card
    look like two. Printed with at least 4 digits, as the kernel does.
    """
    parts = address.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    # a name that is not a PCI address (a test's, a future format's) is compared as written
    if len(parts) == 3 and parts[0] and all(c in "0123456789abcdef" for c in parts[0]):
        parts[0] = f"{int(parts[0], 16):04x}"
    return ":".join(parts)


def read_text(path: Path) -> str | None:
    """A sysfs attribute's text; None when it cannot be read (missing, a loop, a folder).
    Read to one page at most: a longer file is not a sysfs attribute."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_ATTRIBUTE_BYTES + 1)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    if len(data) > MAX_ATTRIBUTE_BYTES:
        return None
    return data.decode("ascii", errors="replace").strip()


def read_hex(path: Path) -> int | None:
    text = read_text(path)
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    try:
        return int(text) if text else None
    except ValueError:
        return None
