"""AMD GPUs' VRAM from the amdgpu driver's sysfs files (issue 40: the kit's worker image has
no ``amdsmi``, so a default AMD kit had no VRAM figure): fake sysfs and /dev trees as the
launcher's hardware tests build them (``hardware_fakes.FakeHost``), ``class/drm/cardN``
links to the PCI functions as the kernel makes them. The worker finds the card its host
index names exactly as the launcher numbered it (the launcher's detection runs on the same
trees), and no hostile file ever gives a wrong or partial figure or an error."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from hardware_fakes import GIB, FakeDocker, FakeHost, FakeNvml

from airig.common import amd_sysfs as shared_rule
from airig.common.protocol import Assignment, CompleteRequest
from airig.executors.context import ExecContext, ExecResult
from airig.launcher.hardware import detect
from airig.launcher.hardware.choice import gpu_slots
from airig.worker import amd_sysfs
from airig.worker.amd_sysfs import probe_sysfs_gpus
from airig.worker.gpus import probe_gpus
from airig.worker.runner import Worker
from airig.worker.settings import WorkerSettings
from airig.worker.vram import PeakSampler, cards_used_mb

AMD, NVIDIA, INTEL = 0x1002, 0x10DE, 0x8086
MIB = 1024**2


class AmdHost(FakeHost):
    """A FakeHost with amdgpu's DRM entries: ``class/drm/cardN`` (its ``device`` a link to
    the PCI function), the connectors and render nodes beside them."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.drm = self.sys / "class" / "drm"
        self.drm.mkdir(parents=True)
        self.next_card = 0
        self.next_kfd = 1
        self.kfd_node(0, cpu_cores_count=16, simd_count=0)  # the CPU's node

    def amd(self, bus: int, vram: int, used: int, minor: int, apu: bool = False,
            kfd: bool = True, product: str | None = None) -> AmdHost:  # fmt: skip
        address = f"0000:{bus:02x}:00.0"
        self.pci(address, AMD, 0x744C, driver="amdgpu", vram=vram, vram_used=used)
        if product is not None:
            (self.pci_dir(address) / "product_name").write_text(product + "\n")
        if kfd:
            self.kfd_node(self.next_kfd, cpu_cores_count=8 if apu else 0, simd_count=96,
                          gfx_target_version=110000, location_id=bus << 8, domain=0,
                          drm_render_minor=minor)  # fmt: skip
            self.next_kfd += 1
        return self.card(address, minor)

    def card(self, address: str, minor: int) -> AmdHost:
        number = self.next_card
        self.next_card += 1
        for name in (f"card{number}", f"renderD{minor}"):
            (self.drm / name).mkdir()
            (self.drm / name / "device").symlink_to(self.pci_dir(address))
        (self.drm / f"card{number}-DP-1").mkdir()  # a connector: no device link of a card
        (self.drm / f"card{number}-DP-1" / "device").symlink_to(self.drm / f"card{number}")
        return self

    def pci_dir(self, address: str) -> Path:
        return self.sys / "bus" / "pci" / "devices" / address

    def container(self, *minors: int) -> Path:
        """A worker container's /dev: /dev/kfd and only its render nodes
        (compose/gpu_workers.py ``_pin``)."""
        dev = self.sys.parent / f"dev-{'-'.join(map(str, minors)) or 'cpu'}"
        (dev / "dri").mkdir(parents=True, exist_ok=True)
        (dev / "kfd").touch()
        for minor in minors:
            (dev / "dri" / f"renderD{minor}").touch()
        return dev

    def read(self, indexes: list[int], *minors: int) -> list[tuple[int, str, int, int]]:
        dev = self.container(*minors) if minors else self.dev
        gpus = probe_sysfs_gpus(indexes, sysfs_root=self.sys, dev_root=dev)
        return [(g.index, g.name, g.vram_total_mb, g.vram_free_mb) for g in gpus]


@pytest.fixture
def host(tmp_path: Path) -> AmdHost:
    return AmdHost(tmp_path)


def test_a_worker_reads_its_own_card_under_its_host_index(host):
    host.amd(0x03, 16 * GIB, 1 * GIB, 128).amd(
        0x0A, 24 * GIB, 5 * GIB, 129, product="Radeon RX 7900 XTX"
    )
    assert host.read([1], 129) == [(1, "Radeon RX 7900 XTX", 24576, 24576 - 5120)]
    assert host.read([0], 128) == [(0, "AMD GPU 0x744c", 16384, 16384 - 1024)]
    assert host.read([0, 1], 128, 129) == [
        (0, "AMD GPU 0x744c", 16384, 15360), (1, "Radeon RX 7900 XTX", 24576, 19456),
    ]  # fmt: skip


def launcher_slots(host: AmdHost, igpu: bool) -> list[tuple[int, str]]:
    report = detect(sysfs_root=host.sys, dev_root=host.dev, nvml=FakeNvml(init_error=12),
                    amdsmi=None, docker_client=FakeDocker(), probe_image=["missing/image:1"],
                    pci_ids=None)  # fmt: skip
    return [(s.index, s.render_node) for s in gpu_slots(report, "gpu-amd", igpu)]


def spy_rule(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Who applies the shared numbering rule (``airig.common.amd_sysfs.host_order``): per
    call, the type of the cards it numbered (the launcher's ``GpuInfo``, the worker's
    sysfs reading ``_Found``)."""
    calls: list[str] = []
    rule = shared_rule.host_order

    def spied(cards, igpu):
        cards = list(cards)
        calls.append(type(cards[0]).__name__ if cards else "")
        return rule(cards, igpu)

    monkeypatch.setattr(shared_rule, "host_order", spied)
    return calls


@pytest.mark.parametrize("igpu", [False, True])
def test_the_worker_and_the_launcher_number_the_cards_alike(host, igpu, monkeypatch):
    # PCI order differs from render-minor and cardN order; an APU first, a card amdgpu
    # bound without a KFD node (the launcher skips it), an NVIDIA and an Intel card between
    host.amd(0x0C, 8 * GIB, 1 * GIB, 131)
    host.pci("0000:05:00.0", NVIDIA, 0x2504, driver="nvidia")
    host.card("0000:05:00.0", 140)
    host.amd(0x03, 16 * GIB, 2 * GIB, 130)
    host.amd(0x04, 12 * GIB, 3 * GIB, 133, kfd=False)
    host.amd(0x01, 1 * GIB, 256 * MIB, 129, apu=True)
    host.pci("0000:00:02.0", INTEL, 0x4680, driver="i915")
    host.card("0000:00:02.0", 128)
    host.amd(0x0B, 20 * GIB, 4 * GIB, 132)
    host.amd_nodes(render=("renderD128", "renderD129", "renderD130", "renderD131",
                           "renderD132", "renderD133", "renderD140"))  # fmt: skip
    calls = spy_rule(monkeypatch)
    slots = launcher_slots(host, igpu)
    assert calls == ["GpuInfo"]  # the launcher numbered its detected cards by the rule
    assert len(slots) == (4 if igpu else 3)
    used_mb = {"/dev/dri/renderD129": 256, "/dev/dri/renderD130": 2048,
               "/dev/dri/renderD131": 1024, "/dev/dri/renderD132": 4096}  # fmt: skip
    for index, node in slots:
        minor = int(node.removeprefix("/dev/dri/renderD"))
        [(got, _, total, free)] = host.read([index], minor)
        assert (got, total - free) == (index, used_mb[node])
    assert set(calls[1:]) == {"_Found"}  # and the worker its sysfs reading, by the same


def test_a_changed_rule_renumbers_the_launcher_and_the_worker_alike(host, monkeypatch):
    """The launcher keeps no numbering of its own: with the shared rule reversed its GPU 0
    is the second card, and the worker given that card reads it as GPU 0."""
    host.amd(0x03, 16 * GIB, 1 * GIB, 128).amd(0x0A, 24 * GIB, 5 * GIB, 129)
    host.amd_nodes(render=("renderD128", "renderD129"))
    assert launcher_slots(host, False) == [(0, "/dev/dri/renderD128"), (1, "/dev/dri/renderD129")]
    rule = shared_rule.host_order
    monkeypatch.setattr(shared_rule, "host_order", lambda cards, igpu: rule(cards, igpu)[::-1])
    assert launcher_slots(host, False) == [(0, "/dev/dri/renderD129"), (1, "/dev/dri/renderD128")]
    assert host.read([0], 129) == [(0, "AMD GPU 0x744c", 24576, 24576 - 5120)]


def test_with_an_apu_beside_a_card_the_containers_render_node_decides(host):
    # the worker does not know AIRIG_IGPU: index 0 is the APU with it, the card without
    host.amd(0x01, 512 * MIB, 100 * MIB, 128, apu=True).amd(0x03, 16 * GIB, 1 * GIB, 129)
    host.amd_nodes(render=("renderD128", "renderD129"))
    assert host.read([0], 129) == [(0, "AMD GPU 0x744c", 16384, 15360)]
    assert host.read([0], 128) == [(0, "AMD GPU 0x744c", 512, 412)]
    assert host.read([0]) == []  # the bare host sees both: not certain, no figure


def test_a_worker_without_its_render_node_reads_nothing(host):
    host.amd(0x03, 16 * GIB, 1 * GIB, 128)
    assert host.read([0], 129) == []  # a container given another card
    assert probe_sysfs_gpus([], sysfs_root=host.sys, dev_root=host.container()) == []  # CPU


def write(path: Path, text: str | bytes) -> None:
    path.unlink()
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


HOSTILE = {
    "used missing": lambda d: (d / "mem_info_vram_used").unlink(),
    "total missing": lambda d: (d / "mem_info_vram_total").unlink(),
    "not a number": lambda d: write(d / "mem_info_vram_used", "N/A\n"),
    "a float": lambda d: write(d / "mem_info_vram_used", "1.5e9\n"),
    "NUL": lambda d: write(d / "mem_info_vram_used", b"10\x0020\n"),
    "negative": lambda d: write(d / "mem_info_vram_used", "-1\n"),
    "used > total": lambda d: write(d / "mem_info_vram_used", f"{24 * GIB + 1}\n"),
    "total zero": lambda d: write(d / "mem_info_vram_total", "0\n"),
    "huge total": lambda d: write(d / "mem_info_vram_total", "9" * 40 + "\n"),
    "huge file": lambda d: write(d / "mem_info_vram_used", "1" * 10_000_000),
    "a folder": lambda d: ((d / "mem_info_vram_used").unlink(), (d / "mem_info_vram_used").mkdir()),
    "a link loop": lambda d: ((d / "mem_info_vram_used").unlink(),
                              (d / "mem_info_vram_used").symlink_to(d / "mem_info_vram_used")),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_file_of_one_owned_card_gives_no_reading_at_all(host, case):
    # two cards owned: the healthy one's figure alone would be a partial sum
    host.amd(0x03, 16 * GIB, 1 * GIB, 128).amd(0x0A, 24 * GIB, 5 * GIB, 129)
    assert len(host.read([0, 1], 128, 129)) == 2
    HOSTILE[case](host.pci_dir("0000:0a:00.0"))
    assert host.read([0, 1], 128, 129) == []
    assert len(host.read([0], 128)) == 1  # the other worker's card still reads


def test_a_cardN_of_another_vendor_at_the_cards_place_is_never_read(host):
    # the AMD card's own cardN is gone; card0 is NVIDIA's, card1 Intel's, each with figures
    host.amd(0x03, 16 * GIB, 1 * GIB, 128)
    for name in ("card0", "card0-DP-1", "renderD128"):
        for entry in (host.drm / name).iterdir():
            entry.unlink()
        (host.drm / name).rmdir()
    for address, vendor, minor in (("0000:01:00.0", NVIDIA, 140), ("0000:02:00.0", INTEL, 141)):
        host.pci(address, vendor, 0x1234, driver="x", vram=8 * GIB, vram_used=GIB)
        host.card(address, minor)
    assert host.read([0], 128) == []


def test_a_cardN_whose_vendor_file_says_another_vendor_is_skipped(host):
    host.amd(0x03, 16 * GIB, 1 * GIB, 128)
    write(host.pci_dir("0000:03:00.0") / "vendor", "0x10de\n")
    assert host.read([0], 128) == []


def test_connectors_render_nodes_and_link_loops_are_not_cards(host):
    host.amd(0x03, 16 * GIB, 1 * GIB, 128)
    loop = host.drm / "card7"
    loop.mkdir()
    (loop / "device").symlink_to(loop / "device")  # a loop where a device link should be
    (host.drm / "card9").symlink_to(host.drm / "card9")  # the entry itself a loop
    (host.drm / "version").write_text("drm 1.1.0 20060810\n")
    assert host.read([0], 128) == [(0, "AMD GPU 0x744c", 16384, 15360)]


def test_two_cardN_claiming_one_card_give_no_reading(host):
    host.amd(0x03, 16 * GIB, 1 * GIB, 128)
    (host.drm / "card5").mkdir()
    (host.drm / "card5" / "device").symlink_to(host.pci_dir("0000:03:00.0"))
    assert host.read([0], 128) == []


def test_an_owned_index_past_the_cards_gives_no_reading(host):
    host.amd(0x03, 16 * GIB, 1 * GIB, 128)
    assert host.read([0, 1], 128) == [] and host.read([-1], 128) == []


def test_a_hostile_product_name_is_bounded_and_printable(host):
    host.amd(0x03, 16 * GIB, 1 * GIB, 128, product="\x1b[31m" + "R" * 1000)
    [(_, name, _, _)] = host.read([0], 128)
    assert name == "[31m" + "R" * 252


def test_no_sysfs_at_all_is_no_cards(tmp_path):
    assert probe_sysfs_gpus([0], sysfs_root=tmp_path / "none", dev_root=tmp_path) == []
    assert probe_sysfs_gpus([0], sysfs_root=Path("/sys\x00"), dev_root=tmp_path) == []


@pytest.fixture
def amd_worker(host, monkeypatch) -> AmdHost:
    """NVML and amdsmi absent (the kit's worker image on an AMD host); the fallback's roots
    are the fake tree and GPU 0's container."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    host.amd(0x03, 16 * GIB, 1 * GIB, 128)
    monkeypatch.setattr(amd_sysfs, "SYSFS_ROOT", host.sys)
    monkeypatch.setattr(amd_sysfs, "DEV_ROOT", host.container(128))
    return host


def set_used(host: AmdHost, used: int) -> None:
    write(host.pci_dir("0000:03:00.0") / "mem_info_vram_used", f"{used}\n")


def test_without_amdsmi_the_heartbeat_and_the_peak_come_from_sysfs(amd_worker):
    assert [(g.index, g.vram_total_mb, g.vram_free_mb) for g in probe_gpus([0])] == [
        (0, 16384, 15360)
    ]
    sampler = PeakSampler(cards_used_mb([0]), growth=True, interval_s=3600)
    for used in (1 * GIB, 7 * GIB, 3 * GIB):
        set_used(amd_worker, used)
        sampler.sample()
    assert sampler.peak_mb() == 6 * 1024


def test_amdsmi_wins_where_it_answers(amd_worker, monkeypatch):
    from test_amd_gpus import FakeSmi

    monkeypatch.setitem(sys.modules, "amdsmi", FakeSmi([("Radeon (amdsmi)", 8000, [10])]))
    assert [(g.name, g.vram_total_mb) for g in probe_gpus([0])] == [("Radeon (amdsmi)", 8000)]


def attempt(tmp_path: Path, during: int) -> CompleteRequest:
    """One transcribe attempt on GPU worker 0 whose card's use is ``during`` bytes while
    it runs."""
    settings = WorkerSettings(
        WORKER_CLASSES="script", WORKER_GPU="0", WORKER_WORK_DIR=str(tmp_path / "work"),
        DATA_DIR=str(tmp_path),
    )  # fmt: skip
    reported: list[CompleteRequest] = []

    class Brain:
        def report(self, task: Assignment, body: CompleteRequest) -> None:
            reported.append(body)

    w = Worker(settings, link=Brain())  # type: ignore[arg-type]
    w.pipeline = Brain()  # type: ignore[assignment]
    card = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:03:00.0"

    def transcribe(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        if during >= 0:
            write(card / "mem_info_vram_used", f"{during}\n")
        else:
            os.unlink(card / "mem_info_vram_used")
        return ExecResult(output={"text": "hi"}, metrics={"wall_ms": 5})

    w.executor = transcribe
    task = Assignment(
        task_id=1, plan_id="p", key="t", name="t", type="transcribe", task_class="script",
        payload={"model": "large-v3", "input": "a.wav"}, model="large-v3", timeout_s=30,
        attempt=1, lease_id="l", lease_expires_at=0.0,
    )  # fmt: skip
    outcome, released = w.run_attempt(task, threading.Event(), tmp_path)
    assert not released
    w.report(task, outcome, tmp_path)
    [body] = reported
    return body


def test_a_completion_on_a_default_amd_kit_reports_its_peak(amd_worker, tmp_path):
    assert attempt(tmp_path, 4 * GIB).peak_vram_mb == 3 * 1024


def test_a_card_that_stops_reading_never_fails_the_attempt(amd_worker, tmp_path):
    body = attempt(tmp_path, -1)
    assert body.output == {"text": "hi"} and body.peak_vram_mb is None
