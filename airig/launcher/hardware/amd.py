"""AMD GPUs for ROCm containers: device nodes, their groups, and the KFD topology.

A ROCm container needs ``/dev/kfd`` (the compute driver) and ``/dev/dri/renderD*``;
images that do not run as root reach them only through the numeric GIDs that own them
(``group_add`` by name fails when the image lacks the group). ``AmdHost.gids`` holds each
such GID once: on most ROCm hosts kfd and the render nodes share the `render` group.
The gfx target comes from the KFD topology, which the kernel publishes without ROCm user
space installed.
``amdsmi`` is used for marketing names when it imports; its import can print and raise
anything when ``libamd_smi.so`` is missing, so it is guarded broadly.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# KFD's topology is read in common: the worker numbers its AMD cards from it too
from airig.common.amd_sysfs import KfdNode as KfdNode
from airig.common.amd_sysfs import gfx_target as gfx_target
from airig.common.amd_sysfs import kfd_node as kfd_node
from airig.common.amd_sysfs import normalize_address, read_kfd_nodes

# RDNA2 consumer targets ROCm does not ship kernels for run the gfx1030 ones.
_HSA_OVERRIDES = {
    "gfx1031": "10.3.0",
    "gfx1032": "10.3.0",
    "gfx1034": "10.3.0",
    "gfx1035": "10.3.0",
    "gfx1036": "10.3.0",
}


@dataclass(frozen=True)
class AmdHost:
    """The host side of a ROCm container."""

    kfd_present: bool
    render_nodes: tuple[str, ...] = ()
    kfd_gid: int | None = None
    render_gid: int | None = None
    gids: tuple[int, ...] = ()  # every GID owning kfd or a render node, sorted, each once
    nodes: tuple[KfdNode, ...] = ()
    smi_names: dict[str, str] = field(default_factory=dict)  # pci address -> market name
    smi_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["nodes"] = [asdict(node) for node in self.nodes]
        return data


def scan_amd(sysfs_root: Path, dev_root: Path, amdsmi: Any = None) -> AmdHost:
    """Device nodes under ``dev_root``, KFD nodes under ``sysfs_root``, names via amdsmi."""
    kfd = Path(dev_root) / "kfd"
    render_paths = sorted((Path(dev_root) / "dri").glob("renderD*"))
    kfd_gid = owner_gid(kfd)
    render_gids = [gid for gid in (owner_gid(path) for path in render_paths) if gid is not None]
    names, note = read_smi_names(amdsmi) if amdsmi is not None else ({}, None)
    return AmdHost(
        kfd_present=kfd.exists(),
        render_nodes=tuple(path.name for path in render_paths),
        kfd_gid=kfd_gid,
        render_gid=render_gids[0] if render_gids else None,
        gids=tuple(sorted({*render_gids, *([kfd_gid] if kfd_gid is not None else [])})),
        nodes=tuple(read_kfd_nodes(Path(sysfs_root))),
        smi_names=names,
        smi_note=note,
    )


def owner_gid(path: Path) -> int | None:
    try:
        return os.stat(path).st_gid
    except OSError:
        return None


def hsa_override_for(target: str | None) -> str | None:
    """The HSA_OVERRIDE_GFX_VERSION that lets ROCm run on this consumer target, if any."""
    return _HSA_OVERRIDES.get(target or "")


def load_amdsmi() -> tuple[Any | None, str | None]:
    """The amdsmi module, or None and why. Catches everything: its import may exit."""
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            return importlib.import_module("amdsmi"), None
    except (Exception, SystemExit) as exc:  # any failure means "no amdsmi"
        return None, f"amdsmi unavailable ({type(exc).__name__}: {exc})"


def read_smi_names(amdsmi: Any) -> tuple[dict[str, str], str | None]:
    """PCI address → market name for every GPU amdsmi lists."""
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # AmdSmiException or a ctypes failure
        return {}, f"amdsmi_init failed: {exc}"
    try:
        names = {}
        for handle in amdsmi.amdsmi_get_processor_handles():
            address = normalize_address(str(amdsmi.amdsmi_get_gpu_device_bdf(handle)))
            names[address] = str(amdsmi.amdsmi_get_gpu_asic_info(handle)["market_name"])
        return names, None
    except Exception as exc:  # names are decoration, never fatal
        return {}, f"amdsmi query failed: {exc}"
    finally:
        with contextlib.suppress(Exception):
            amdsmi.amdsmi_shut_down()
