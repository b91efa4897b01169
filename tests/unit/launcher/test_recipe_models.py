"""Recipes on the default .env (issue 35 §3): `pdf-text` runs without the vision model,
`AIRIG_RECIPES` / `up --recipe NAME` pull what a recipe needs, and a worker never loads a
model its task will not call."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path

import pytest
import yaml
from support import ROOT, one_error, write_env

from airig.common.errors import AirigError, ConfigError
from airig.common.protocol import Assignment
from airig.executors.base import uses_model
from airig.launcher import plan_inputs, recipes
from airig.launcher.settings import load_settings
from airig.worker.runner import Worker
from airig.worker.settings import WorkerSettings
from airig.worker.swap import Swapper

VISION = "qwen2.5vl:7b"


@pytest.fixture
def rig(kit: Path) -> Path:
    """The kit copy with its recipes and the default .env (which pulls no vision model)."""
    shutil.copytree(ROOT / "recipes", kit / "recipes")
    write_env(kit)
    return kit


def _settings(kit: Path, **flags: str):
    return load_settings(kit, flags)


def _ocr_payload(body: bytes) -> dict:
    plan = yaml.safe_load(body)
    group = next(t for t in plan["tasks"] if t["id"] == "ocr")  # the fan-out over pages
    return next(t for t in group["tasks"] if t["type"] == "ocr")["payload"]


def test_the_default_env_pulls_no_vision_model(rig):
    # the premise of the issue: were this to change, the tests below would prove less
    assert VISION not in _settings(rig).ollama_models


def test_pdf_text_runs_on_the_default_env_with_tesseract(rig):
    body = (rig / "recipes" / "pdf-text.yaml").read_bytes()
    filled = plan_inputs.fill_models(body, _settings(rig), "pdf-text.yaml")
    payload = _ocr_payload(filled)
    assert payload["model"] == "" and payload["engine"] == "auto"
    assert b"{{ models." not in filled  # every placeholder filled: the brain sees none


def test_pdf_text_uses_the_vision_model_when_the_rig_pulls_it(rig):
    settings = _settings(rig, AIRIG_RECIPES="pdf-text")
    body = (rig / "recipes" / "pdf-text.yaml").read_bytes()
    assert _ocr_payload(plan_inputs.fill_models(body, settings, "p"))["model"] == VISION


@pytest.mark.parametrize("recipe", ["video-notes", "photos-captions"])
def test_a_recipe_that_needs_the_vision_model_is_refused_naming_the_fix(rig, recipe):
    body = (rig / "recipes" / f"{recipe}.yaml").read_bytes()
    with pytest.raises(AirigError) as caught:
        plan_inputs.fill_models(body, _settings(rig), recipe)
    assert VISION in caught.value.message and "does not pull" in caught.value.message
    assert "up --recipe" in caught.value.hint


@pytest.mark.parametrize("recipe", ["video-notes", "photos-captions", "pdf-text"])
def test_airig_recipes_pulls_what_the_recipe_runs_and_submit_accepts_it(rig, recipe):
    settings = _settings(rig, AIRIG_RECIPES=recipe)
    env = recipes.pull_env(settings)
    ollama = env["AIRIG_OLLAMA_MODELS"].split(",")
    assert ollama[: len(settings.ollama_models)] == list(settings.ollama_models)  # .env's first
    assert VISION in ollama
    assert ollama.count("nomic-embed-text") == 1  # a model .env lists is not added twice
    body = (rig / "recipes" / f"{recipe}.yaml").read_bytes()
    assert VISION.encode() in plan_inputs.fill_models(body, settings, recipe)


def test_one_model_spelled_two_ways_is_pulled_once(rig):
    write_env(rig, AIRIG_OLLAMA_MODELS=f"library/{VISION},nomic-embed-text:latest")
    env = recipes.pull_env(_settings(rig, AIRIG_RECIPES="photos-captions,video-notes"))
    assert env["AIRIG_OLLAMA_MODELS"].split(",") == [
        f"library/{VISION}", "nomic-embed-text:latest", "qwen2.5:7b-instruct-q4_K_M",
    ]  # fmt: skip


def test_without_airig_recipes_dot_envs_lists_stand_as_written(rig):
    assert recipes.pull_env(_settings(rig)) == {}


@pytest.mark.parametrize(
    "name", ["nope", "../.env", "/etc/passwd", "pdf-text.yaml", "pdf-text\x00", "é" * 300]
)
def test_a_name_that_is_no_recipe_is_one_line_naming_the_recipes(rig, name):
    with pytest.raises(ConfigError) as caught:
        recipes.pull_env(_settings(rig, AIRIG_RECIPES=name))
    assert "which is no recipe" in caught.value.message
    assert "pdf-text, photos-captions, video-notes" in caught.value.hint


def test_a_huge_file_in_recipes_is_refused_not_read_whole(rig):
    (rig / "recipes" / "huge.yaml").write_bytes(b"# " + b"x" * (recipes.MAX_RECIPE_BYTES + 10))
    with pytest.raises(ConfigError, match="over"):
        recipes.pull_env(_settings(rig, AIRIG_RECIPES="huge"))


def test_up_pulls_the_recipes_models_through_host_env(rig, monkeypatch):
    """What ollama-init reads: host.env comes after .env, so its list wins."""
    import io

    from hardware_fakes import FakeDocker
    from rich.console import Console

    from airig.launcher.compose.docker import Docker
    from airig.launcher.lifecycle.up import Launcher

    class Engine(Docker):
        def sdk(self):
            return FakeDocker()

    def dry_up(**flags: str):
        launcher = Launcher(_settings(rig, AIRIG_PROFILE="cpu", **flags), Engine(),
                            Console(file=io.StringIO()))  # fmt: skip
        return launcher.up(dry_run=True).plan

    for key in [k for k in __import__("os").environ if k.startswith("AIRIG_")]:
        monkeypatch.delenv(key)
    plan = dry_up(AIRIG_RECIPES="video-notes")
    host_env = next(text for path, text in plan.generated.items() if path.name == "host.env")
    line = next(x for x in host_env.splitlines() if x.startswith("AIRIG_OLLAMA_MODELS="))
    assert VISION in line.split("=", 1)[1].split(",")
    plain = dry_up()
    host_env = next(text for path, text in plain.generated.items() if path.name == "host.env")
    assert "AIRIG_OLLAMA_MODELS=" not in host_env  # .env's own line stands


def _cli(kit: Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRIG_")}
    env.update(AIRIG_HOME=str(kit), COLUMNS="200", DOCKER_HOST="unix:///nonexistent.sock")
    return subprocess.run(
        [sys.executable, str(ROOT / "start_services.py"), *args],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def test_up_recipe_with_an_unknown_name_is_one_line_and_leaves_env_alone(rig):
    before = (rig / ".env").read_text()
    done = _cli(rig, "up", "--profile", "cpu", "--recipe", "video-note")
    one_error(done.returncode, done.stderr, "video-note", "no recipe")
    assert (rig / ".env").read_text() == before


def test_up_recipe_writes_airig_recipes_then_goes_on_with_up(rig):
    # no engine here: `up` stops at its Docker check, after .env was written
    done = _cli(rig, "up", "--profile", "cpu", "--recipe", "video-notes")
    assert "AIRIG_RECIPES=video-notes written to .env" in done.stdout
    one_error(done.returncode, done.stderr, "daemon")
    settings = _settings(rig)
    assert settings.recipes == ("video-notes",)
    again = _cli(rig, "up", "--profile", "cpu", "--recipe", "video-notes", "--recipe", "pdf-text")
    assert "AIRIG_RECIPES=video-notes,pdf-text written" in again.stdout
    assert _settings(rig).recipes == ("video-notes", "pdf-text")


def test_up_recipe_dry_run_writes_nothing(rig):
    before = (rig / ".env").read_text()
    done = _cli(rig, "up", "--dry-run", "--profile", "cpu", "--recipe", "photos-captions")
    assert done.returncode == 0, done.stderr
    assert (rig / ".env").read_text() == before


# ------------------------------------------------------------------ the worker's swap
def _assignment(task_type: str, payload: dict, load: str | None = VISION) -> Assignment:
    return Assignment(
        task_id=1, plan_id="p", key="k", name="k", type=task_type, task_class="llm",
        payload=payload, model=load, timeout_s=60, attempt=1, lease_id="l",
        lease_expires_at=0.0, evict=["qwen2.5:7b-instruct-q4_K_M"], load=load,
    )  # fmt: skip


def _swapper(gpu_index: int | None) -> Swapper:
    env = {"WORKER_CLASSES": "cpu,script,llm"}
    if gpu_index is not None:
        env["WORKER_GPU"] = str(gpu_index)
    settings = WorkerSettings.model_validate(env)
    return Swapper(settings)


OCR_AUTO = {"images": ["a.png"], "engine": "auto", "model": VISION}


def test_a_cpu_worker_running_ocr_by_tesseract_loads_no_model():
    # today's bug: `model.load pdfs__1__ocr qwen2.5vl:7b cpu-2` before tesseract ran
    swapper = _swapper(None)
    assert swapper.enabled  # the CPU profile's workers take llm and hold Ollama's models
    assert not swapper.needed(_assignment("ocr", OCR_AUTO))
    assert not swapper.needed(_assignment("ocr", {**OCR_AUTO, "engine": "tesseract"}))


def test_a_task_that_calls_its_model_still_swaps():
    assert _swapper(0).needed(_assignment("ocr", OCR_AUTO))  # a GPU worker: the vision path
    assert _swapper(None).needed(_assignment("ocr", {**OCR_AUTO, "engine": "vision"}))
    assert _swapper(None).needed(_assignment("llm", {"model": VISION, "prompt": "hi"}))


def test_a_swapper_that_skips_the_load_runs_the_task_without_any_model_call(tmp_path):
    calls: list[str] = []
    settings = WorkerSettings.model_validate({"WORKER_CLASSES": "cpu,script,llm"})
    worker = Worker(settings, link=object())  # type: ignore[arg-type]
    worker.swapper = Swapper(
        settings, run=lambda *a: calls.append("swap-step"),  # type: ignore[arg-type,return-value]
    )  # fmt: skip
    worker.executor = lambda task_type, *_: calls.append(task_type)  # type: ignore[assignment,func-returns-value]
    worker.run_attempt(_assignment("ocr", OCR_AUTO), threading.Event(), tmp_path)
    assert calls == ["ocr"]


@pytest.mark.parametrize("payload", [{}, {"images": [], "engine": "bogus"}, {"image": "\x00"}])
def test_a_payload_that_will_fail_validation_loads_nothing(payload):
    assert not uses_model("ocr", payload, 0)


# ------------------------------------------------------------------ --inputs-dir names
def test_a_data_volume_folder_keeps_its_unicode_name():
    assert plan_inputs.data_relative("inputs/写真") == "inputs/写真"
    decomposed = unicodedata.normalize("NFD", "inputs/Café")
    assert plan_inputs.data_relative(decomposed) == unicodedata.normalize("NFC", "inputs/Café")
    assert plan_inputs.outputs_dir(Path("写真-captions.yaml"), "inputs/東京") == (
        "outputs/写真-captions/東京"
    )


@pytest.mark.parametrize(
    "value",
    ["../x", "/etc", "inputs/../..", "inputs/a b", "inputs/*", "inputs/{a,b}", "inputs/a\nb",
     "inputs/a\x00", "", ".", "inputs/$(id)", "inputs/\u202eexe"],
)  # fmt: skip
def test_a_folder_name_a_glob_yaml_or_shell_would_read_is_refused(value):
    with pytest.raises(AirigError, match="not a folder of the data volume"):
        plan_inputs.data_relative(value)
