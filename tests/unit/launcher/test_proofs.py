"""Proof on the host (issue 34 §1): each failure as upstream prints it, the fallback order,
the pin that is refused, the cache. Outputs in proof_outputs/ (README there says where
each quote comes from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import unprivileged

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.images import choose_images, parse_catalog
from airig.launcher.proofs.cache import ProofCache, proof_report
from airig.launcher.proofs.judge import FAILED, PASSED, TIMEOUT, Outcome, Verdict, judge
from airig.launcher.proofs.scripts import INFERENCE_COMPUTE, spec_for
from airig.launcher.proofs.settle import distinct_gpus, settle, verdict_of

HERE = Path(__file__).parent / "proof_outputs"


def said(name: str) -> str:
    return (HERE / name).read_text()


def rtx3060(index: int = 0, driver: str = "535.183.01") -> GpuInfo:
    return GpuInfo("nvidia", "NVIDIA GeForce RTX 3060", "discrete", index=index,
                   driver_version=driver, compute_capability="8.6")  # fmt: skip


def gtx1060(index: int = 0, driver: str = "535.183.01") -> GpuInfo:
    return GpuInfo("nvidia", "NVIDIA GeForce GTX 1060 6GB", "discrete", index=index,
                   driver_version=driver, compute_capability="6.1")  # fmt: skip


# A catalogue whose order the tests read: newest first, then an older Ollama, then CPU
CATALOG = parse_catalog({
    "ollama": {
        "nvidia": [
            {"image": "ollama/ollama:0.31.2", "min_driver": "531", "archs": ["6.0", "8.6"]},
            {"image": "ollama/ollama:0.24.0", "min_driver": "531", "archs": ["6.0", "8.6"]},
        ],
        "cpu": {"image": "ollama/ollama:0.24.0"},
    },
    "comfyui": {
        "nvidia": [{"image": "yanwk/comfyui-boot:cu126-slim", "min_driver": "525.60.13",
                    "archs": ["6.0", "8.6"]}],
        "cpu": {"image": "yanwk/comfyui-boot:cpu", "args": "--cpu"},
    },
    "whisper": {
        "nvidia": [
            {"image": "speaches:cuda-12.4.1", "min_driver": "525", "archs": ["6.0", "8.6"]},
        ],
        "cpu": {"image": "speaches:cpu"},
    },
})  # fmt: skip


# ------------------------------------------------------------------ the judge
def test_error_804_is_quoted_with_the_compat_fix():
    status, detail, fix = judge(Outcome(1, said("whisper_804.out")))
    assert status == FAILED
    assert "forward compatibility was attempted on non supported HW" in detail
    assert "cudaErrorCompatNotSupportedOnDevice" in detail
    assert "data-center GPU" in fix


def test_device_kernel_image_is_invalid_fails_ollama_despite_its_discovery():
    status, detail, fix = judge(Outcome(None, said("ollama_kernel_invalid.out")),
                                INFERENCE_COMPUTE)  # fmt: skip
    assert (status, detail) == (FAILED, "CUDA error: device kernel image is invalid")
    assert "newer NVIDIA driver" in fix


def test_no_compatible_gpus_is_quoted():
    status, detail, fix = judge(Outcome(None, said("ollama_no_gpu.out")), INFERENCE_COMPUTE)
    assert status == FAILED and "no compatible GPUs were discovered" in detail
    assert "finds no GPU it supports" in fix


def test_ollama_discovery_of_the_gpu_passes_and_names_it():
    status, detail, _ = judge(Outcome(None, said("ollama_cuda.out")), INFERENCE_COMPUTE)
    assert (status, detail) == (PASSED, "Ollama discovered NVIDIA GeForce RTX 3060 (cuda)")


def test_ollama_discovering_fewer_gpus_than_given_fails():
    status, detail, _ = judge(Outcome(None, said("ollama_cuda.out")), INFERENCE_COMPUTE, gpus=2)
    assert status == FAILED and "1 of the 2 GPUs" in detail


def test_pytorch_no_kernel_image_is_quoted():
    status, detail, fix = judge(Outcome(1, said("comfyui_no_kernel.out")))
    assert status == FAILED
    assert detail == (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    )
    assert "compute capability" in fix


def test_a_pass_needs_the_mark_and_exit_zero():
    ok = "noise\nAIRIG-PROOF OK PyTorch 2.9.1 on NVIDIA GeForce RTX 3060\n"
    assert judge(Outcome(0, ok)) == (PASSED, "PyTorch 2.9.1 on NVIDIA GeForce RTX 3060", "")
    assert judge(Outcome(1, ok))[0] == FAILED  # the mark, then a crash at exit
    assert judge(Outcome(0, "all good, trust me"))[0] == FAILED  # no mark: nothing proved


def test_a_hang_is_a_timeout_with_one_fix():
    status, detail, fix = judge(Outcome(None, "loading…", timed_out=True, seconds=180))
    assert (status, detail) == (TIMEOUT, "no answer in 180 s")
    assert "AIRIG_PROOF_TIMEOUT" in fix
    status, detail, _ = judge(Outcome(None, "", timed_out=True, seconds=9), INFERENCE_COMPUTE)
    assert (status, detail) == (TIMEOUT, "no GPU discovery line in 9 s")


def test_hostile_output_is_clipped_and_nul_free():
    flood = "x" * 1_000_000 + "\x00CUDA error: device kernel image is invalid" + "\x00" * 10
    status, detail, _ = judge(Outcome(1, flood))
    assert status == FAILED and len(detail) <= 300 and "\x00" not in detail
    assert judge(Outcome(137, ""))[1] == "exited 137 with no output"


def test_ollama_on_vulkan_has_no_proof_here():
    assert spec_for("ollama", "vulkan") is None  # vulkaninfo in its image is its proof
    assert spec_for("whisper", "rocm") is None  # speaches has no ROCm build
    assert spec_for("ollama", "cuda").until == INFERENCE_COMPUTE
    assert spec_for("comfyui", "xpu").entrypoint[-1] == "xpu"


# ------------------------------------------------------------------ the fallback order
def prover(failing: dict[str, str]):
    """A proof that fails the images of ``failing`` with that output; records each call."""
    calls: list[tuple[str, str]] = []

    def prove(choice, spec, gpu):
        calls.append((choice.image, gpu.name))
        out = failing.get(choice.image)
        outcome = Outcome(1, out) if out is not None else Outcome(0, "AIRIG-PROOF OK fine")
        status, detail, fix = judge(outcome, "")
        return verdict_of(choice, gpu, "sha256:" + choice.image, status, detail, fix, 1.0)

    return prove, calls


def settle_on(gpus, failing, pins=None):
    pins = pins or {}

    def rechoose(excluded):
        return choose_images(CATALOG, "gpu-nvidia", gpus, pins, excluded=excluded)

    prove, calls = prover(failing)
    selection = rechoose(frozenset())
    return settle(selection, gpus, pins, prove, rechoose, lambda i: i.split("@")[0]), calls


def test_a_failed_image_gives_way_to_the_next_that_fits():
    settled, calls = settle_on([rtx3060()], {"ollama/ollama:0.31.2": said("whisper_804.out")})
    ollama = settled.selection.of("ollama")
    assert (ollama.image, ollama.on_gpu) == ("ollama/ollama:0.24.0", True)
    assert settled.selection.env["OLLAMA_IMAGE"] == "ollama/ollama:0.24.0"
    assert ("ollama/ollama:0.31.2", "NVIDIA GeForce RTX 3060") in calls
    assert ("ollama/ollama:0.24.0", "NVIDIA GeForce RTX 3060") in calls  # proved in turn
    line = settled.moved["ollama"]["line"]
    assert line.startswith('ollama/ollama:0.31.2 on NVIDIA GeForce RTX 3060 (driver 535.183.01): "')
    assert "→ using ollama/ollama:0.24.0;" in line
    assert any("✘" in out and "0.31.2" in out for out in settled.lines)


def test_every_gpu_image_failing_ends_on_the_cpu_image_with_a_warning():
    failing = {"speaches:cuda-12.4.1": said("whisper_804.out")}
    settled, _ = settle_on([gtx1060()], failing)
    whisper = settled.selection.of("whisper")
    assert (whisper.image, whisper.on_gpu) == ("speaches:cpu", False)
    assert whisper.warning.startswith("Whisper runs on CPU: speaches:cuda-12.4.1 on NVIDIA")
    assert "its CPU image speaches:cpu" in whisper.warning
    assert settled.moved["whisper"]["on_gpu"] is False
    assert settled.selection.of("ollama").on_gpu  # the others keep their GPUs


def test_a_pinned_image_that_fails_stops_up_with_the_quote():
    pins = {"OLLAMA_IMAGE": "ollama/ollama:0.31.2"}
    failing = {"ollama/ollama:0.31.2": said("ollama_kernel_invalid.out")}
    settled, _ = settle_on([rtx3060()], failing, pins)
    refusal = settled.selection.of("ollama").refusal
    assert refusal is not None and settled.selection.of("ollama").image == "ollama/ollama:0.31.2"
    assert refusal.message == (
        "OLLAMA_IMAGE=ollama/ollama:0.31.2 failed its proof on NVIDIA GeForce RTX 3060 (driver "
        '535.183.01): "CUDA error: device kernel image is invalid"'
    )
    assert "empty OLLAMA_IMAGE in .env" in refusal.hint
    assert settled.moved == {}


def test_one_proof_per_gpu_model_and_driver():
    gpus = [gtx1060(0), gtx1060(1), gtx1060(2), rtx3060(3), rtx3060(4, driver="550.54.14")]
    assert [(g.name, g.driver_version) for g in distinct_gpus(gpus)] == [
        ("NVIDIA GeForce GTX 1060 6GB", "535.183.01"),
        ("NVIDIA GeForce RTX 3060", "535.183.01"),
        ("NVIDIA GeForce RTX 3060", "550.54.14"),
    ]
    settled, calls = settle_on(gpus, {})
    assert len(calls) == 3 * 3  # three services × three distinct GPUs
    assert settled.moved == {}


def test_a_failure_on_one_gpu_model_of_a_mixed_rig_moves_the_service():
    gpus = [gtx1060(0), rtx3060(1)]
    out = said("comfyui_no_kernel.out")

    def prove(choice, spec, gpu):
        bad = choice.service == "comfyui" and "1060" in gpu.name
        outcome = Outcome(1, out) if bad else Outcome(0, "AIRIG-PROOF OK fine")
        status, detail, fix = judge(outcome)
        return verdict_of(choice, gpu, "id", status, detail, fix, 1.0)

    def rechoose(excluded):
        return choose_images(CATALOG, "gpu-nvidia", gpus, {}, excluded=excluded)

    settled = settle(rechoose(frozenset()), gpus, {}, prove, rechoose, str)
    comfy = settled.selection.of("comfyui")
    assert (comfy.image, comfy.args) == ("yanwk/comfyui-boot:cpu", "--cpu")
    assert settled.moved["comfyui"]["gpu"] == "NVIDIA GeForce GTX 1060 6GB"


# ------------------------------------------------------------------ the cache
def verdict(status=PASSED, driver="535.183.01", image_id="sha256:aa") -> Verdict:
    return Verdict("whisper", "speaches:cuda-12.4.1", image_id, "NVIDIA GeForce GTX 1060 6GB",
                   driver, status, "fine", "", 2.0, "2026-11-27T09:00:00+00:00")  # fmt: skip


def test_the_cache_keeps_a_verdict_per_image_gpu_and_driver(tmp_path):
    cache = ProofCache(tmp_path)
    cache.put(verdict())
    cache.put(verdict(TIMEOUT, image_id="sha256:bb"))  # a hang says nothing of the image
    cache.save()
    again = ProofCache(tmp_path)
    kept = again.get("whisper", "sha256:aa", "NVIDIA GeForce GTX 1060 6GB", "535.183.01")
    assert kept is not None and kept.passed and kept.recalled
    assert again.get("whisper", "sha256:bb", "NVIDIA GeForce GTX 1060 6GB", "535.183.01") is None
    # a driver update or a new image digest is a new key: proved again
    assert again.get("whisper", "sha256:aa", "NVIDIA GeForce GTX 1060 6GB", "550.54.14") is None
    assert again.get("whisper", "sha256:cc", "NVIDIA GeForce GTX 1060 6GB", "535.183.01") is None


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 99}', "\x00\xff",
                                  '{"version": 1, "verdicts": {"k": {"nope": 1}}}'])  # fmt: skip
def test_a_damaged_cache_means_proving_again_not_a_crash(tmp_path, text):
    (tmp_path / "proofs.json").write_text(text, errors="surrogateescape")
    cache = ProofCache(tmp_path)
    assert cache.verdicts == {} and proof_report(tmp_path) == {"verdicts": [], "moved": {}}
    cache.put(verdict())
    cache.save()
    assert json.loads((tmp_path / "proofs.json").read_text())["version"] == 1


def test_the_report_shows_the_last_up(tmp_path):
    cache = ProofCache(tmp_path)
    cache.last_up = [verdict().to_dict()]
    cache.outcome = {"whisper": {"line": "x", "on_gpu": False}}
    cache.save()
    report = proof_report(tmp_path)
    assert report["verdicts"][0]["status"] == PASSED
    assert report["moved"] == {"whisper": {"line": "x", "on_gpu": False}}


def test_a_read_only_state_dir_fails_the_save_and_keeps_the_old_file(tmp_path):
    cache = ProofCache(tmp_path)
    cache.put(verdict())
    cache.save()
    before = (tmp_path / "proofs.json").read_text()
    tmp_path.chmod(0o500)
    try:
        cache.put(verdict(image_id="sha256:dd"))
        failed = unprivileged(cache.save)
    finally:
        tmp_path.chmod(0o700)
    assert failed is not None and failed[0] == "PermissionError"
    assert (tmp_path / "proofs.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["proofs.json"]


def test_a_pin_of_a_tag_listed_twice_fits_when_either_entry_fits():
    """0.32.15 is two entries (CC 7.0+ on ≥ 550, CC 5.0-6.2 on ≥ 570): a GTX 1060 on 570
    fits the second, so its pin is kept, not refused by the first entry's floor."""
    catalog = parse_catalog({
        "ollama": {
            "nvidia": [
                {"image": "ollama/ollama:9.9", "min_driver": "550", "archs": ["7.0"],
                 "min_capability": "7.0"},
                {"image": "ollama/ollama:9.9", "min_driver": "570", "archs": [], "ptx": "5.0"},
            ],
            "cpu": {"image": "ollama/ollama:9.9"},
        },
        "comfyui": {"cpu": {"image": "c:cpu"}},
        "whisper": {"cpu": {"image": "w:cpu"}},
    })  # fmt: skip
    pins = {"OLLAMA_IMAGE": "ollama/ollama:9.9"}
    kept = choose_images(catalog, "gpu-nvidia", [gtx1060(driver="570.86.10")], pins)
    assert kept.of("ollama").refusal is None and kept.of("ollama").on_gpu
    refused = choose_images(catalog, "gpu-nvidia", [gtx1060(driver="560.35.03")], pins)
    assert refused.of("ollama").refusal is not None


# ------------------------------------------------------------------ Ollama's load proof
def test_the_load_proof_runs_only_where_ollama_is_on_cuda_or_rocm(tmp_path):
    from airig.launcher.proofs.host import load_proof_env
    from airig.launcher.settings import load_settings

    (tmp_path / ".env").write_text("")
    settings = load_settings(tmp_path)
    on_gpu = choose_images(CATALOG, "gpu-nvidia", [rtx3060()], {})
    assert load_proof_env(settings, on_gpu) == {
        "AIRIG_LOAD_PROOF": "gpu", "AIRIG_LOAD_PROOF_IMAGE": "ollama/ollama:0.31.2"
    }  # fmt: skip
    on_cpu = choose_images(CATALOG, "cpu", [], {})
    assert load_proof_env(settings, on_cpu)["AIRIG_LOAD_PROOF"] == "off"
    (tmp_path / ".env").write_text("AIRIG_PROOF=off\n")
    assert load_proof_env(load_settings(tmp_path), on_gpu)["AIRIG_LOAD_PROOF"] == "off"


def test_the_failed_load_is_read_from_ollama_inits_log_lines():
    from airig.launcher.proofs.host import load_failure

    failed = {"event": "load_proof", "status": "failed", "model": "qwen2.5:0.5b",
              "said": "llama runner process has terminated: CUDA error: device kernel image "
                      "is invalid"}  # fmt: skip
    logs = "\n".join([
        'ollama-init-1  | {"event": "pull", "model": "qwen2.5:0.5b"}',
        "ollama-init-1  | not json {",
        f"ollama-init-1  | {json.dumps(failed)}",
    ])  # fmt: skip
    assert load_failure(logs) == failed
    passed = json.dumps({**failed, "status": "passed"})
    assert load_failure(passed) is None
    assert load_failure("") is None and load_failure('{"event": "load_proof"') is None


def test_an_image_without_python_is_not_judged():
    from airig.launcher.proofs.judge import NOT_RUN

    said = "AIRIG-PROOF NOT-RUN the image has no python3 or python\n"
    assert judge(Outcome(97, said)) == (NOT_RUN, "the image has no python3 or python", "")
    assert judge(Outcome(1, said))[0] == FAILED  # the mark alone, without its exit, is not it
