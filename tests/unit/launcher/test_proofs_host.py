"""`up`'s proofs bound to the engine, the cache and .env (proofs/host.py), on the seed rig:
five GTX 1060 on driver 535, images from the real catalogue. The engine is a fake that
answers each proof container with the output a test gives its image."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from docker.errors import ImageNotFound, NotFound

from airig.launcher.compose.docker import Docker
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.choice import Choice, select_images
from airig.launcher.hardware.report import HardwareReport
from airig.launcher.proofs.host import prove_images
from airig.launcher.settings import load_settings

HERE = Path(__file__).parent / "proof_outputs"
WHISPER_CUDA = "ghcr.io/speaches-ai/speaches:0.8.3-cuda-12.4.1"
OK = "AIRIG-PROOF OK fine\n"
OLLAMA_OK = (HERE / "ollama_cuda.out").read_text()


class ProofContainer:
    def __init__(self, output: str) -> None:
        self.output = output
        self.attrs = {"State": {"Status": "exited", "ExitCode": 0 if "OK" in output else 1}}
        if "inference compute" in output:  # a server: still running when read
            self.attrs = {"State": {"Status": "running"}}

    def reload(self) -> None:
        pass

    def logs(self, stdout: bool = True, stderr: bool = True) -> bytes:
        return self.output.encode()

    def remove(self, force: bool = False) -> None:
        pass


class ProofEngine:
    """images.get (id = the name's digest) and containers.run for proofs."""

    def __init__(self, said: dict[str, str], present: set[str]) -> None:
        self.said, self.present, self.runs = said, present, []
        self.images, self.containers = self, self

    def get(self, name: str):
        if name.startswith("airig-proof-"):
            raise NotFound(name)
        if name not in self.present:
            raise ImageNotFound(name)
        return type("Image", (), {"id": f"sha256:{abs(hash(name))}"})()

    def run(self, image: str, **kwargs):
        self.runs.append((image, kwargs["device_requests"][0]["DeviceIDs"]))
        return ProofContainer(self.said.get(image, OK if "ollama" not in image else OLLAMA_OK))


class Adapter(Docker):
    def __init__(self, engine: ProofEngine) -> None:
        super().__init__()
        self.engine, self.pulled = engine, []

    def probe_sdk(self, timeout: float):
        return self.engine

    def pull_image(self, image: str) -> None:
        self.pulled.append(image)
        self.engine.present.add(image)


def seed_rig(driver: str = "535.183.01") -> Choice:
    gpus = tuple(
        GpuInfo("nvidia", "NVIDIA GeForce GTX 1060 6GB", "discrete", index=i,
                driver_version=driver, compute_capability="6.1")
        for i in range(5)
    )  # fmt: skip
    return Choice("gpu-nvidia", "detection", [], None, [], HardwareReport(gpus=gpus))


@pytest.fixture
def settings_of(launcher_kit: Path):
    def make(extra: str = ""):
        env = (launcher_kit / ".env.example").read_text().replace("change-me", "s3cret")
        (launcher_kit / ".env").write_text(env + extra)
        return load_settings(launcher_kit)

    return make


def run(settings, engine, choice=None, reprove=False):
    choice = choice or seed_rig()
    lines: list[str] = []
    selection = select_images(settings, choice.report, choice.profile)
    settled = prove_images(settings, Adapter(engine), choice, selection, lines.append, reprove)
    return settled, lines


def test_error_804_moves_whisper_to_its_cpu_image_and_a_second_up_proves_nothing(settings_of):
    settings = settings_of()
    engine = ProofEngine({WHISPER_CUDA: (HERE / "whisper_804.out").read_text()}, set())
    settled, lines = run(settings, engine)
    whisper = settled.selection.of("whisper")
    assert not whisper.on_gpu and whisper.image.endswith("-cpu")
    assert "forward compatibility was attempted on non supported HW" in whisper.warning
    # one proof per image on the one GPU model: the five cards share model and driver
    images = [image for image, _ in engine.runs]
    assert len(images) == len(set(images)) == 3  # ollama, comfyui, whisper: once each
    assert all(ids == ["0"] for _, ids in engine.runs)  # on the first card, by its id
    assert settled.selection.of("ollama").on_gpu and settled.selection.of("comfyui").on_gpu
    assert any("✘" in line and WHISPER_CUDA in line for line in lines)
    saved = json.loads((settings.state_dir / "proofs.json").read_text())
    assert saved["outcome"]["whisper"]["on_gpu"] is False
    assert len(saved["last_up"]) == 3
    # the second `up`: every verdict recalled, no container run, the same outcome
    before = len(engine.runs)
    again, lines = run(settings, engine)
    assert len(engine.runs) == before
    assert not again.selection.of("whisper").on_gpu
    assert any("proved before" in line for line in lines)
    # --reprove runs them all again
    run(settings, engine, reprove=True)
    assert len(engine.runs) == 2 * before


def test_images_are_pulled_before_their_proof(settings_of):
    engine = ProofEngine({}, set())
    adapter = Adapter(engine)
    choice = seed_rig()
    selection = select_images(settings_of(), choice.report, choice.profile)
    prove_images(settings_of(), adapter, choice, selection, lambda line: None)
    assert set(adapter.pulled) == {c.image for c in selection.choices if c.on_gpu}


def test_a_driver_update_proves_again(settings_of):
    settings = settings_of()
    engine = ProofEngine({}, set())
    run(settings, engine)
    before = len(engine.runs)
    run(settings, engine, seed_rig("535.216.01"))
    assert len(engine.runs) == 2 * before


def test_proofs_off_runs_nothing_and_says_so(settings_of):
    settings = settings_of("AIRIG_PROOF=off\n")
    engine = ProofEngine({WHISPER_CUDA: (HERE / "whisper_804.out").read_text()}, set())
    settled, lines = run(settings, engine)
    assert engine.runs == [] and settled.selection.of("whisper").on_gpu
    assert len(lines) == 1 and "AIRIG_PROOF=off" in lines[0]


def test_a_pinned_whisper_that_fails_is_refused(settings_of):
    settings = settings_of(f"WHISPER_IMAGE_CUDA={WHISPER_CUDA}\n")
    engine = ProofEngine({WHISPER_CUDA: (HERE / "whisper_804.out").read_text()}, set())
    settled, _ = run(settings, engine)
    refusal = settled.selection.of("whisper").refusal
    assert refusal is not None and refusal.message.startswith(f"WHISPER_IMAGE_CUDA={WHISPER_CUDA}")
    assert "error 804" in refusal.message
