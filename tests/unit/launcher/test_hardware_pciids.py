"""GPU names from a fixture ``pci.ids``: the format, where it is found, and detection."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from hardware_fakes import FakeHost, FakeNvml, gtx1060, write_pci_ids

from airig.launcher.hardware import detect, nvml_facts
from airig.launcher.hardware.amd import AmdHost
from airig.launcher.hardware.merge import merge_gpus
from airig.launcher.hardware.pci import scan_pci
from airig.launcher.hardware.pciids import DeviceEntry, PciIds, find_pci_ids

NVIDIA, AMD, INTEL = 0x10DE, 0x1002, 0x8086


@pytest.fixture
def ids(tmp_path: Path) -> PciIds:
    return PciIds(write_pci_ids(tmp_path / "pci.ids"))


@pytest.mark.parametrize(
    ("vendor", "device", "subsystem", "name"),
    [
        # the card's subsystem is listed: its name says which board it is
        (AMD, 0x744C, (0x1DA2, 0x471E), "NITRO+ RX 7900 XTX Vapor-X"),
        (AMD, 0x744C, (0x1002, 0x0E3B), "Radeon RX 7900 GRE"),
        # not listed (or unknown): the device's name
        (AMD, 0x744C, (0x1458, 0x2408), "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]"),
        (AMD, 0x744C, (None, None), "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]"),
        (AMD, 0x1638, (0x1002, 0x0E3B), "Cezanne [Radeon Vega Series / Radeon Vega Mobile Series]"),
        (NVIDIA, 0x1C03, (0x1043, 0x85AC), "GeForce GTX 1060 6GB"),
        (NVIDIA, 0x1002, (None, None), "not AMD: an NVIDIA device id"),
        (INTEL, 0x56A0, (None, None), "DG2 [Arc A770]"),
        (0x1003, 0x744C, (None, None), "not AMD's 744c"),
        # not in the database
        (AMD, 0x0201, (None, None), None),  # 1003's device: AMD's section ended before it
        (AMD, 0x7550, (None, None), None),
        (0x1AF4, 0x1050, (None, None), None),  # vendor absent
    ],
)
def test_names_follow_the_file_format(
    ids: PciIds, vendor: int, device: int, subsystem: tuple, name: str | None
) -> None:
    assert ids.name(vendor, device, *subsystem) == name


def test_only_the_asked_devices_lines_are_parsed(ids: PciIds) -> None:
    assert ids.name(AMD, 0x744C) is not None
    assert set(ids._sections) == {AMD} and set(ids._devices) == {(AMD, 0x744C)}
    # the commented-out subsystem line is not an entry; the next vendor's lines are not his
    assert ids.device(AMD, 0x744C) == DeviceEntry(
        "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]",
        {(0x1002, 0x0E3B): "Radeon RX 7900 GRE", (0x1DA2, 0x471E): "NITRO+ RX 7900 XTX Vapor-X"},
    )
    start, end = ids.section(AMD)
    assert ids._read()[start:end].decode().splitlines()[0].startswith("\t1638  Cezanne")
    assert ids._read()[end:].startswith(b"\n1003  ULSI Systems")
    assert ids.section(0x1AF4) == (0, 0)


@pytest.mark.parametrize(
    ("data", "found"),
    [
        # a vendor on the first line; CRLF line ends; the last device at the end of file
        (b"1002  AMD\r\n\t744c  Navi 31\r\n\t\t1da2 471e  Nitro\r\n", ("Nitro", "Navi 31")),
        (b"1002  AMD\n\t744c  Navi 31", (None, "Navi 31")),  # no final newline
        (b"1002  AMD", (None, None)),  # a vendor without devices
        (b"\t744c  a device line is no vendor\n1002  AMD\n", (None, None)),
        (b"1002  AMD\n\t744c\n\t\t1da2 471e  Nitro\n", (None, None)),  # malformed line
        (b"", (None, None)),
    ],
)
def test_edges_of_the_format(tmp_path: Path, data: bytes, found: tuple) -> None:
    path = tmp_path / "pci.ids"
    path.write_bytes(data)
    ids = PciIds(path)
    assert (ids.name(AMD, 0x744C, 0x1DA2, 0x471E) if found[0] else None) == found[0]
    assert ids.name(AMD, 0x744C) == found[1]


def test_gzip_database_reads_the_same(tmp_path: Path) -> None:
    gz = PciIds(write_pci_ids(tmp_path / "pci.ids.gz", gz=True))
    assert gz.name(AMD, 0x73BF, 0x1002, 0x0E3A) == "Radeon RX 6900 XT"


@pytest.mark.parametrize("content", [None, b"\x1f\x8b not gzip", b"\xff\xfe\x00garbage"])
def test_a_missing_or_broken_database_names_nothing(tmp_path: Path, content) -> None:
    path = tmp_path / "pci.ids.gz"
    if content is not None:
        path.write_bytes(content)
    assert PciIds(path).name(AMD, 0x744C) is None
    assert PciIds(None).name(AMD, 0x744C) is None


def test_the_database_is_found_where_lspci_looks(tmp_path: Path) -> None:
    misc, hwdata = tmp_path / "misc" / "pci.ids", tmp_path / "hwdata" / "pci.ids"
    assert find_pci_ids([misc, hwdata]) is None
    write_pci_ids(Path(f"{hwdata}.gz"), gz=True)
    assert find_pci_ids([misc, hwdata]) == Path(f"{hwdata}.gz")
    write_pci_ids(hwdata)
    assert find_pci_ids([misc, hwdata]) == hwdata  # the plain file before its .gz
    write_pci_ids(misc)
    assert find_pci_ids([misc, hwdata]) == misc  # the first place first


class CountingIds(PciIds):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads = 0

    def _read(self) -> bytes:
        self.reads += self._data is None  # the file itself, not the cached bytes
        return super()._read()


def test_the_database_is_read_only_for_a_card_nothing_else_names(tmp_path: Path) -> None:
    host = FakeHost(tmp_path).pci("0000:01:00.0", NVIDIA, 0x1C03, driver="nvidia")
    counting = CountingIds(write_pci_ids(tmp_path / "pci.ids"))
    nvml = nvml_facts(FakeNvml([gtx1060(1)]))
    merge_gpus(scan_pci(host.sys), nvml, AmdHost(kfd_present=False), counting)
    assert counting.reads == 0  # NVML named the only card
    host.pci("0000:02:00.0", AMD, 0x744C, driver="amdgpu", vram=24 << 30)
    merge_gpus(scan_pci(host.sys), nvml, AmdHost(kfd_present=False), counting)
    assert counting.reads == 1


def test_detection_names_each_card_from_the_best_source(tmp_path: Path) -> None:
    """amdsmi and NVML names win; pci.ids names the rest (subsystem first); without a
    database entry a card is its vendor and PCI id."""
    host = (
        FakeHost(tmp_path)
        .pci("0000:00:02.0", INTEL, 0x4680, driver="i915")
        .pci("0000:01:00.0", NVIDIA, 0x1C03, driver="nvidia", subsystem=(0x1043, 0x85AC))
        .pci("0000:02:00.0", NVIDIA, 0x1C03, driver="nouveau", subsystem=(0x10DE, 0x0001))
        .pci(
            "0000:03:00.0", AMD, 0x744C, driver="amdgpu", vram=24 << 30, subsystem=(0x1DA2, 0x471E)
        )
        .pci(
            "0000:04:00.0", AMD, 0x73BF, driver="amdgpu", vram=16 << 30, subsystem=(0x1458, 0x2408)
        )
        .pci("0000:05:00.0", AMD, 0x7550, driver="amdgpu", vram=16 << 30)
        .pci(
            "0000:06:00.0", AMD, 0x744C, driver="amdgpu", vram=24 << 30, subsystem=(0x1002, 0x0E3B)
        )
        .amd_nodes()
    )
    amdsmi = types.SimpleNamespace(
        amdsmi_init=lambda: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["h6"],
        amdsmi_get_gpu_device_bdf=lambda handle: "0000:06:00.0",
        amdsmi_get_gpu_asic_info=lambda handle: {"market_name": "AMD Radeon RX 7900 GRE (smi)"},
    )
    report = detect(
        host.sys,
        host.dev,
        nvml=FakeNvml([gtx1060(1)]),
        amdsmi=amdsmi,
        docker_client=None,
        pci_ids=write_pci_ids(tmp_path / "share" / "pci.ids"),
    )
    assert {gpu.pci_address: gpu.name for gpu in report.gpus} == {
        "0000:00:02.0": "Intel AlderLake-S GT1 [UHD Graphics 770]",
        "0000:01:00.0": "NVIDIA GeForce GTX 1060 6GB",  # NVML's
        "0000:02:00.0": "NVIDIA GP106 [GeForce GTX 1060 6GB]",  # pci.ids: NVML misses it
        "0000:03:00.0": "AMD NITRO+ RX 7900 XTX Vapor-X",
        "0000:04:00.0": "AMD Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]",
        "0000:05:00.0": "AMD GPU 0x7550",
        "0000:06:00.0": "AMD Radeon RX 7900 GRE (smi)",  # amdsmi's
    }
    by_address = {d.address: d for d in scan_pci(host.sys)}
    assert by_address["0000:03:00.0"].to_dict()["subsystem_vendor_id"] == "0x1da2"
    assert by_address["0000:05:00.0"].to_dict()["subsystem_device_id"] is None
    # no database: the PCI ids, as before
    plain = detect(host.sys, host.dev, nvml=None, amdsmi=None, docker_client=None, pci_ids=None)
    assert {gpu.name for gpu in plain.gpus if gpu.vendor == "intel"} == {"Intel GPU 0x4680"}
