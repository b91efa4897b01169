"""The onnx OCR engine on an NVIDIA worker's CUDA image (issue 39 §2): CUDA's and cuDNN's
libraries are pip wheels there, which the loader does not find, so the engine calls
``onnxruntime.preload_dlls()`` before its first CUDA session. Here against the real CPU
onnxruntime with ``preload_dlls`` replaced (present, absent, raising, printing failures):
a preload that fails leaves the task reading on the CPU and saying why, never failing it."""

from __future__ import annotations

import logging

import pytest
import rapidocr_onnxruntime  # noqa: F401 - binds the real InferenceSession for its CPU sessions
from support_media import make_text_png

from airig.executors import ocr_onnx
from airig.executors.base import run_task
from airig.executors.ocr_onnx import CPU, CUDA, preload_cuda

LIBCUDNN = "libcudnn.so.9: cannot open shared object file: No such file or directory"


@pytest.fixture
def ctx(make_ctx):
    context = make_ctx(timeout_s=120)
    context.gpu_index = 0
    return context


@pytest.fixture(autouse=True)
def fresh_engine(monkeypatch):
    """Each test loads its own engine (the cache is per process), on a worker whose
    onnxruntime lists the CUDA provider."""
    monkeypatch.setattr(ocr_onnx, "available_providers", lambda: [CUDA, CPU])
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    ocr_onnx._engine_cached.cache_clear()
    yield
    ocr_onnx._engine_cached.cache_clear()


class Sessions:
    """onnxruntime.InferenceSession as the engine's CUDA sessions see it: each asked-for
    provider list recorded in ``events``; ``gets`` what onnxruntime hands back."""

    def __init__(self, events: list, gets: list[str]) -> None:
        self.events, self.gets = events, gets

    def __call__(self, path, sess_options=None, providers=None):
        self.events.append(("session", providers))
        gets = self.gets

        class Session:
            _model_path = path

            def get_providers(self):
                return gets

        return Session()


def patched(monkeypatch, preload, gets: list[str]) -> list:
    import onnxruntime

    events: list = []
    if preload is None:
        monkeypatch.delattr(onnxruntime, "preload_dlls", raising=False)
    else:
        monkeypatch.setattr(onnxruntime, "preload_dlls", lambda: preload(events), raising=False)
    monkeypatch.setattr(onnxruntime, "InferenceSession", Sessions(events, gets))
    return events


def test_the_libraries_are_preloaded_before_the_first_cuda_session(ctx, monkeypatch, caplog):
    events = patched(monkeypatch, lambda events: events.append(("preload", None)), [CUDA, CPU])
    monkeypatch.setattr(ocr_onnx, "read_text", lambda *_: "text")  # fake sessions read nothing
    make_text_png(ctx.data_dir / "scan.png", ["Hello"])
    with caplog.at_level(logging.INFO, logger="airig.executors.ocr"):
        output = run_task("ocr", {"image": "scan.png", "engine": "onnx"}, ctx).output
    assert events[0] == ("preload", None)
    assert events[1:] == [("session", [(CUDA, {"device_id": 0}), CPU])] * 3
    assert output["providers"] == [CUDA, CPU] and "engine_warning" not in output
    [record] = [r for r in caplog.records if r.getMessage() == "ocr engine onnx"]
    assert record.levelno == logging.INFO
    assert (record.providers, record.preload, record.why) == ([CUDA, CPU], "preloaded", "")


def test_an_onnxruntime_without_preload_dlls_still_asks_for_cuda(monkeypatch):
    """onnxruntime-gpu before 1.21: the loader's own path (a CUDA base image's)."""
    events = patched(monkeypatch, None, [CUDA, CPU])
    engine = ocr_onnx._engine_cached((CUDA, CPU), 0)
    assert [kind for kind, _ in events] == ["session"] * 3
    assert engine.used == (CUDA, CPU) and engine.preload == "no preload_dlls"


def test_a_preload_that_raises_reads_on_the_cpu_and_says_why(ctx, monkeypatch, caplog):
    """No CUDA session is even tried: the real CPU sessions read the page."""

    def raising(events):
        events.append(("preload", None))
        raise OSError(LIBCUDNN)

    events = patched(monkeypatch, raising, [CUDA, CPU])
    make_text_png(ctx.data_dir / "scan.png", ["Hello Airig"])
    with caplog.at_level(logging.INFO, logger="airig.executors.ocr"):
        output = run_task("ocr", {"image": "scan.png", "engine": "onnx"}, ctx).output
    assert events == [("preload", None)]  # no CUDA session asked for
    assert {"hello", "airig"} <= {w.strip(".,").lower() for w in output["text"].split()}
    assert output["providers"] == [CPU] and output["providers_requested"] == [CUDA, CPU]
    assert output["engine_warning"] == (
        f"asked onnxruntime for {CUDA}, {CPU} but it runs on {CPU} only: {CUDA} did not "
        f"start (onnxruntime.preload_dlls() raised OSError: {LIBCUDNN})"
    )
    [record] = [r for r in caplog.records if r.getMessage() == "ocr engine onnx"]
    assert record.levelno == logging.WARNING and record.preload == "failed"


def test_what_preload_printed_is_the_reason_when_cuda_is_dropped(ctx, monkeypatch):
    """preload_dlls prints, not raises, a library it could not load; onnxruntime then
    drops CUDA without an error. The warning quotes the first lines, each cut."""

    def printing(events):
        print("Failed to load /opt/airig/lib/python3.12/site-packages/nvidia/cudnn/lib/" + LIBCUDNN)
        print("Failed to load " + "x" * 10_000)
        print("Failed to load \x00\x1b[31m libcublasLt.so.12")
        print("Failed to load libcufft.so.11")
        print("Please follow https://onnxruntime.ai/docs/install/#cuda-and-cudnn to install CUDA.")

    patched(monkeypatch, printing, [CPU])
    monkeypatch.setattr(ocr_onnx, "read_text", lambda *_: "text")
    make_text_png(ctx.data_dir / "scan.png", ["Hello"])
    output = run_task("ocr", {"image": "scan.png", "engine": "onnx"}, ctx).output
    warning = output["engine_warning"]
    assert f"{CUDA} did not start (Failed to load /opt/airig/" in warning
    assert LIBCUDNN in warning and "libcublasLt.so.12" in warning
    assert "libcufft" not in warning and "Please follow" not in warning  # three lines at most
    assert len(warning) < 1200  # the 10 000 characters were cut
    assert warning.isprintable()  # the NUL and the escape are gone


def test_a_cpu_worker_never_preloads(make_ctx, monkeypatch):
    calls: list = []
    patched(monkeypatch, lambda events: calls.append("preload"), [CPU])
    monkeypatch.setattr(ocr_onnx, "read_text", lambda *_: "text")
    cpu = make_ctx(timeout_s=120)
    make_text_png(cpu.data_dir / "scan.png", ["Hello"])
    output = run_task("ocr", {"image": "scan.png", "engine": "onnx"}, cpu).output
    assert calls == [] and output["providers"] == [CPU]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (RuntimeError("Invalid parameter of directory=x."), "RuntimeError: Invalid parameter"),
        (ValueError("a\nb\x00c\x1b[31m"), "ValueError: a b c [31m"),
        (MemoryError(), "MemoryError: "),
        (OSError("y" * 5000), "OSError: " + "y" * 10),
    ],
)
def test_any_preload_failure_is_one_bounded_line(error, said):
    class Module:
        @staticmethod
        def preload_dlls():
            raise error

    done = preload_cuda(Module)
    assert not done.ok and done.state == "failed"
    assert said in done.why and done.why.isprintable()
    assert len(done.why) <= 400
