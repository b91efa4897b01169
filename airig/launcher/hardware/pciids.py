"""GPU names from the host's PCI ID database (``pci.ids``), as ``lspci`` shows them.

The format (https://pci-ids.ucw.cz): a vendor line ``1002  Advanced Micro Devices…``, its
devices on lines indented by one tab ``\\t744c  Navi 31 [Radeon RX 7900 XT/7900 XTX…]``,
and under a device its subsystems on lines indented by two tabs
``\\t\\t1002 0e3b  Radeon RX 7900 GRE`` (subsystem vendor, subsystem device, name). Lines
starting with ``#`` are comments; the device classes (``C 03  Display controller``) follow
the vendors. The file is ~1.3 MB, so it is read only when a name is asked for, and only
the asked device's lines are parsed (its vendor and its line found with ``bytes.find``).
"""

from __future__ import annotations

import contextlib
import gzip
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Where lspci looks (Debian/Ubuntu, Fedora/RHEL/Arch, others); each also as pci.ids.gz.
PCI_IDS_PATHS = (
    Path("/usr/share/misc/pci.ids"),
    Path("/usr/share/hwdata/pci.ids"),
    Path("/usr/share/pci.ids"),
)


def find_pci_ids(candidates: Iterable[Path] = PCI_IDS_PATHS) -> Path | None:
    """The first database present: each path as given, then its ``.gz``."""
    for path in candidates:
        for candidate in (Path(path), Path(f"{path}.gz")):
            if candidate.is_file():
                return candidate
    return None


@dataclass(frozen=True)
class DeviceEntry:
    """One device line and the subsystem lines under it."""

    name: str
    subsystems: dict[tuple[int, int], str]  # (subsystem vendor, subsystem device) -> name


class PciIds:
    """Names from one ``pci.ids`` (plain or gzip'd); nothing is read until asked.

    A lookup finds the vendor's section, then the device's line in it, with ``bytes``
    searches, and parses that device's lines only. A missing or unreadable file yields no
    names, never an error: names are decoration.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._data: bytes | None = None
        self._sections: dict[int, tuple[int, int]] = {}
        self._devices: dict[tuple[int, int], DeviceEntry | None] = {}

    def name(
        self,
        vendor_id: int,
        device_id: int,
        subsystem_vendor_id: int | None = None,
        subsystem_device_id: int | None = None,
    ) -> str | None:
        """The subsystem's name when the database lists this card's subsystem (it names
        the exact board), else the device's name, else None."""
        entry = self.device(vendor_id, device_id)
        if entry is None:
            return None
        if subsystem_vendor_id is None or subsystem_device_id is None:
            return entry.name
        return entry.subsystems.get((subsystem_vendor_id, subsystem_device_id)) or entry.name

    def device(self, vendor_id: int, device_id: int) -> DeviceEntry | None:
        key = (vendor_id, device_id)
        if key not in self._devices:
            start, end = self.section(vendor_id)
            self._devices[key] = find_device(self._read(), start, end, device_id)
        return self._devices[key]

    def section(self, vendor_id: int) -> tuple[int, int]:
        """Offsets of the vendor's device lines: from after its vendor line to the next
        vendor (or the class list); (0, 0) when the vendor is not listed."""
        if vendor_id not in self._sections:
            self._sections[vendor_id] = vendor_section(self._read(), vendor_id)
        return self._sections[vendor_id]

    def _read(self) -> bytes:
        if self._data is None:
            self._data = b""
            if self.path is not None:
                with contextlib.suppress(OSError, EOFError, gzip.BadGzipFile):
                    raw = Path(self.path).read_bytes()
                    self._data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        return self._data


# A line that ends a vendor's section: the next vendor, or the class list ("C 03  …").
_NEXT_SECTION = re.compile(rb"\n(?:[0-9a-fA-F]{4}  |C )")


def vendor_section(data: bytes, vendor_id: int) -> tuple[int, int]:
    marker = b"%04x  " % vendor_id
    if data.startswith(marker):
        line = 0
    else:  # vendor lines start a line; device and subsystem lines start with tabs
        line = data.find(b"\n" + marker) + 1
        if line == 0:
            return 0, 0
    start = data.find(b"\n", line) + 1 or len(data)
    following = _NEXT_SECTION.search(data, start - 1)
    return start, following.start() if following else len(data)


def find_device(data: bytes, start: int, end: int, device_id: int) -> DeviceEntry | None:
    """The device line ``\\t744c  name`` in data[start:end] and its subsystem lines."""
    if start >= end:
        return None
    at = data.find(b"\n\t%04x  " % device_id, start - 1, end)
    if at < 0:
        return None
    lines = iter_lines(data, at + 1, end)
    device = parse_entry(next(lines), 2)
    if device is None:
        return None
    subsystems: dict[tuple[int, int], str] = {}
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if not line.strip() or line.lstrip("\t").startswith("#"):
            continue
        if not line.startswith("\t\t"):
            break  # the vendor's next device
        entry = parse_entry(raw, 3)
        if entry is not None:
            (sub_vendor, sub_device), sub_name = entry
            subsystems[(sub_vendor, sub_device)] = sub_name
    return DeviceEntry(device[1], subsystems)


def iter_lines(data: bytes, start: int, end: int) -> Iterator[bytes]:
    """Lines of data[start:end], one at a time: a device's lines are a handful."""
    while start < end:
        stop = data.find(b"\n", start, end)
        stop = end if stop < 0 else stop
        yield data[start:stop]
        start = stop + 1


def parse_entry(raw: bytes, fields: int) -> tuple[tuple[int, ...], str] | None:
    """``fields - 1`` hex ids then a name: ((ids), name), or None when malformed."""
    parts = raw.decode("utf-8", errors="replace").strip().split(None, fields - 1)
    if len(parts) != fields or not parts[-1]:
        return None
    try:
        ids = tuple(int(part, 16) for part in parts[:-1])
    except ValueError:
        return None
    return ids, parts[-1].strip()
