"""AMD GPUs' VRAM from the amdgpu kernel driver's sysfs files, where AMD SMI gives none.

The kit's worker image does not ship ROCm's ``amdsmi`` (``amd_gpus.py``), but every AMD
worker has the amdgpu driver, which publishes each card's VRAM in bytes:
``/sys/class/drm/cardN/device/mem_info_vram_total`` and ``mem_info_vram_used`` (the
kernel's Documentation/gpu/amdgpu/driver-misc.rst, "GPU Memory Usage Information", whose
text is ``amdgpu_vram_mgr.c``'s: "the total amount of VRAM in bytes", "the current VRAM
usage in bytes"). sysfs is not namespaced per device, so a container sees them all,
read-only, whichever render nodes it was given.

Which card is the worker's: ``WORKER_GPU`` holds host indexes the launcher gave, its
position among the host's usable AMD cards (``airig/common/amd_sysfs.py``,
``amd_host_order``, the launcher's rule read from the same files). The worker does not
know ``AIRIG_IGPU``; when the order with and without the integrated cards differ, the one
whose render nodes for the owned indexes are in this container's ``/dev/dri`` (the
launcher maps exactly those, ``compose/gpu_workers.py`` ``_pin``) is taken, and neither or both
is no reading. That check holds always: a card whose render node the container lacks is
not this worker's (a CPU worker, a rig whose cards changed since ``up``).

Only ``cardN`` entries count (``card0-DP-1`` is a connector, ``renderD128`` a render
node), their ``device`` link must lead to the card's PCI address with vendor 0x1002, and
an owned card not found, or with figures that are not plausible, makes the whole reading
none: a partial sum would teach the brain a smaller peak than the true one.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from airig.common.amd_sysfs import (
    AMD_VENDOR,
    AmdCard,
    amd_host_order,
    normalize_address,
    read_hex,
    read_int,
    read_text,
)
from airig.common.protocol import MAX_VRAM_MB, GpuInfo

log = logging.getLogger("airig.worker.amd_sysfs")
MIB = 1024 * 1024
CARD = re.compile(r"card[0-9]{1,6}")
# the roots read when a call names none; tests point them at fake trees
SYSFS_ROOT = Path("/sys")
DEV_ROOT = Path("/dev")


def probe_sysfs_gpus(
    host_indexes: Sequence[int], sysfs_root: Path | None = None, dev_root: Path | None = None
) -> list[GpuInfo]:
    """This worker's AMD GPUs with their VRAM from sysfs, labelled with host indexes; []
    when any owned card cannot be found or read (module docstring). Never raises."""
    try:
        return _probe(list(host_indexes), Path(sysfs_root or SYSFS_ROOT),
                      Path(dev_root or DEV_ROOT))  # fmt: skip
    except Exception as exc:  # telemetry is never worth failing a heartbeat or an attempt
        log.debug("sysfs VRAM read failed", extra={"error": str(exc)})
        return []


def _probe(wanted: list[int], sysfs_root: Path, dev_root: Path) -> list[GpuInfo]:
    owned = _owned_cards(wanted, sysfs_root, dev_root)
    if owned is None:
        return []
    cards = _drm_cards(sysfs_root)
    found = []
    for index, card in owned:
        card_dir = cards.get(card.pci_address)
        if card_dir is None:
            return []  # its cardN is missing, or two claim its address
        info = _one(index, card_dir / "device")
        if info is None:
            return []
        found.append(info)
    return found


def _owned_cards(
    wanted: list[int], sysfs_root: Path, dev_root: Path
) -> list[tuple[int, AmdCard]] | None:
    """(host index, card) for each owned index, or None when which cards they are is not
    certain."""
    nodes = _render_nodes(dev_root)
    if not nodes:  # a CPU worker (every heartbeat asks): no render node, no sysfs walk
        return None
    fits = []
    for order in _distinct(amd_host_order(sysfs_root, igpu=False),
                           amd_host_order(sysfs_root, igpu=True)):  # fmt: skip
        indexes = wanted or list(range(len(order)))
        if not indexes or not all(0 <= i < len(order) for i in indexes):
            continue
        pairs = [(i, order[i]) for i in indexes]
        if all(card.render_node in nodes for _, card in pairs) and pairs not in fits:
            fits.append(pairs)  # both orders naming the same cards is one answer
    return fits[0] if len(fits) == 1 else None


def _distinct(first: list[AmdCard], second: list[AmdCard]) -> list[list[AmdCard]]:
    return [first] if first == second else [first, second]


def _render_nodes(dev_root: Path) -> set[str]:
    try:
        return {name for name in os.listdir(dev_root / "dri") if name.startswith("renderD")}
    except (OSError, ValueError):
        return set()


def _drm_cards(sysfs_root: Path) -> dict[str, Path]:
    """PCI address → its ``class/drm/cardN`` folder, AMD cards only; an address two cards
    claim is left out (which one is the worker's is not certain)."""
    drm = sysfs_root / "class" / "drm"
    try:
        names = sorted(os.listdir(drm))
    except (OSError, ValueError):
        return {}
    found: dict[str, Path] = {}
    claimed: set[str] = set()
    for name in names:
        if not CARD.fullmatch(name):  # connectors (card0-DP-1), renderD*, version
            continue
        device = drm / name / "device"
        if read_hex(device / "vendor") != AMD_VENDOR:
            continue
        try:
            address = normalize_address(os.path.basename(os.path.realpath(device)))
        except (OSError, ValueError):
            continue
        if address in claimed:
            found.pop(address, None)
            continue
        claimed.add(address)
        found[address] = drm / name
    return found


def _one(index: int, device: Path) -> GpuInfo | None:
    """One card from its sysfs device folder, or None when its figures are not plausible."""
    total = read_int(device / "mem_info_vram_total")
    used = read_int(device / "mem_info_vram_used")
    if total is None or used is None or total <= 0 or not 0 <= used <= total:
        return None
    if total // MIB > MAX_VRAM_MB or total < MIB:
        return None
    total_mb = total // MIB
    try:
        return GpuInfo(index=index, name=_name(device), vram_total_mb=total_mb,
                       vram_free_mb=(total - used) // MIB)  # fmt: skip
    except ValidationError:  # an index past the protocol's bound
        return None


def _name(device: Path) -> str:
    """amdgpu's ``product_name`` (boards with a FRU EEPROM), else the launcher's name
    without ``pci.ids``: "AMD GPU 0x744c"."""
    text = read_text(device / "product_name") or ""
    name = "".join(c for c in text if c.isprintable())[:256].strip()
    if name:
        return name
    device_id = read_hex(device / "device")
    return f"AMD GPU 0x{device_id:04x}" if device_id is not None else "AMD GPU"
