"""The shipped recipes (``recipes/*.yaml``) as a user runs them: what their globs take
from a folder, what the CLI says about the rest, what the brain fixes in them, and that
every one passes the brain's plan rules (``load_plan``, what ``POST /v1/plans`` runs) while
a recipe with a bad field is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from support_zim import ARTICLES, make_zim

from airig.brain.plans.fanout import glob_items
from airig.brain.plans.load import load_plan
from airig.brain.plans.parse import PlanSyntaxError
from airig.brain.plans.validate import Limits, PlanInvalid
from airig.brain.settings import BrainSettings
from airig.common.task_schemas import OcrPayload
from airig.launcher import plan_inputs
from airig.launcher.brain_client import CONTENT_TYPES

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
PHOTOS = ["IMG_0001.JPG", "b.jpeg", "c.png", "d.webp", "e.gif", "f.bmp", "g.tif", "h.TIFF",
          "i.Jpg"]  # fmt: skip


def _filled(name: str, data_dir: str = "inputs/folder") -> bytes:
    body = (RECIPES / name).read_bytes()
    body = plan_inputs.fill(body, data_dir, f"outputs/{Path(name).stem}/folder")
    return plan_inputs.MODEL.sub(lambda m: f"{m.group(1)}-model", body.decode()).encode()


def _folder(tmp_path: Path, names: list[str]) -> Path:
    data = tmp_path / "data"
    (data / "inputs" / "folder").mkdir(parents=True)
    for name in names:
        if name.endswith(".zim"):  # the zim recipes read real archives: a few articles, a video
            video = ("videos/talk.mp4", "A talk", "video/mp4", b"x")
            make_zim(data / "inputs" / "folder" / name, [*ARTICLES, video])
        else:
            (data / "inputs" / "folder" / name).write_bytes(b"x")
    return data


# What a recipe reads from its folder: its glob's, or its zim archives' pattern.
READS = re.compile(r'(?:glob|zim): "\{\{ inputs_dir \}\}/([^"]+)"')


def _pattern(recipe: str) -> str:
    found = READS.search((RECIPES / recipe).read_text())
    assert found, f"{recipe} reads no {{{{ inputs_dir }}}}/<pattern>"
    return found.group(1)


def test_photos_captions_takes_every_common_image_type_whatever_its_case(tmp_path):
    data = _folder(tmp_path, [*PHOTOS, "notes.txt"])
    plan, _, _ = load_plan(_filled("photos-captions.yaml"), "application/yaml", Limits(),
                           data)  # fmt: skip
    items = next(t for t in plan.tasks if t.id == "photos").payload["items"]
    assert sorted(i["name"] for i in items) == sorted(PHOTOS)


def test_a_glob_has_alternatives_and_ignores_the_case_of_the_name_only(tmp_path):
    data = tmp_path / "data"
    for path in ("in/A.JPG", "in/b.png", "in/c.txt", "In/d.jpg", "in/sub/e.Png"):
        (data / path).parent.mkdir(parents=True, exist_ok=True)
        (data / path).write_text("x")
    found = [i["path"] for i in glob_items(data, "in/*.{jpg,png}", 100)]
    assert found == ["in/A.JPG", "in/b.png"]  # the folder "In" is another folder
    deep = [i["path"] for i in glob_items(data, "in/**/*.PNG", 100)]
    assert deep == ["in/b.png", "in/sub/e.Png"]


def test_submit_names_the_files_no_glob_of_the_recipe_reads(tmp_path):
    body = (RECIPES / "photos-captions.yaml").read_bytes()
    names = [*PHOTOS, "notes.txt", "clip.mp4"]
    assert plan_inputs.unmatched(body, names) == ["notes.txt", "clip.mp4"]
    line = plan_inputs.unmatched_line(body, names)
    assert line == ("2 files in the folder match no glob of this plan and will not be read: "
                    "notes.txt, clip.mp4")  # fmt: skip
    assert plan_inputs.unmatched_line(body, PHOTOS) is None
    many = [f"{n}.txt" for n in "abcdefg"]
    assert plan_inputs.unmatched_line(body, many).endswith("a.txt, b.txt, c.txt, d.txt, e.txt "
                                                           "and 2 more")  # fmt: skip
    # a plan that names no pattern under {{ inputs_dir }}: nothing to say
    assert plan_inputs.unmatched(b"tasks: [{payload: {dir: '{{ inputs_dir }}'}}]", names) is None


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_the_launcher_and_the_brain_agree_on_what_a_recipe_reads(tmp_path, recipe):
    names = [*PHOTOS, "talk.MP4", "scan.Pdf", "notes.txt", "wiki.zim"]
    data = _folder(tmp_path, names)
    glob = _pattern(recipe)
    taken = {i["name"] for i in glob_items(data, f"inputs/folder/{glob}", 100)}
    left = plan_inputs.unmatched((RECIPES / recipe).read_bytes(), names)
    assert taken and set(names) - taken == set(left or [])


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_dot_files_are_left_out_by_the_launcher_and_the_brain_alike(tmp_path, recipe):
    # an upload in flight is a dot file (.upload-<hex>, services/infra.py): never an item
    dots = [".a.jpg", ".IMG.jpg.part", ".upload-0123abcd", ".talk.mp4", ".scan.pdf"]
    names = [*PHOTOS, "talk.MP4", "scan.Pdf", "wiki.zim", *dots]
    data = _folder(tmp_path, names)
    (data / "inputs" / "folder" / ".hidden").mkdir()
    (data / "inputs" / "folder" / ".hidden" / "b.jpg").write_bytes(b"x")
    glob = _pattern(recipe)
    taken = {i["name"] for i in glob_items(data, f"inputs/folder/{glob}", 100)}
    left = plan_inputs.unmatched((RECIPES / recipe).read_bytes(), names) or []
    assert taken and not taken & set(dots)
    assert set(dots) <= set(left) and set(names) - taken == set(left)


def test_submit_prints_how_many_files_the_recipe_leaves_out(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from airig.launcher.brain_client import BrainClient
    from airig.launcher.cli import tasks
    from airig.launcher.inputs_sync import Synced

    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    for name, value in {"AIRIG_HOME": str(tmp_path), "BRAIN_ADMIN_TOKEN": "t" * 24,
                        "AIRIG_VISION_MODEL": "vision:1",
                        "AIRIG_OLLAMA_MODELS": "vision:1"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    sent = Synced("inputs/photos", uploaded=["a.JPG", "a.txt"], skipped=["b.png", "c.md"])
    monkeypatch.setattr(tasks, "sync", lambda folder, settings: sent)
    monkeypatch.setattr(BrainClient, "submit_body",
                        lambda *args: {"id": "p1", "task_total": 4})  # fmt: skip
    photos = tmp_path / "photos"
    photos.mkdir()
    result = CliRunner().invoke(tasks.app, [
        "submit", str(RECIPES / "photos-captions.yaml"), "--inputs-dir", str(photos),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert ("2 files in the folder match no glob of this plan and will not be read: "
            "a.txt, c.md") in " ".join(result.output.split())  # fmt: skip


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_a_recipe_declares_every_task_class_so_submit_prints_no_fix(tmp_path, recipe):
    from airig.brain.plans.validate import infer_class

    data = _folder(tmp_path, ["a.jpg", "a.mp4", "a.pdf", "a.zim"])
    plan, _, _ = load_plan(_filled(recipe), "application/yaml", Limits(), data)
    assert plan.fixes == []
    for task in plan.tasks:
        if task.type != "group":  # the class each type would be given: the same work
            assert task.task_class == infer_class({"type": task.type})[0], task.id


# ------------------------------------------------------------------ the brain's plan rules
SHIPPED = sorted(p.name for p in RECIPES.glob("*.yaml"))
# One input of each kind a recipe globs, so that every template task of a group is built
# as an item and validated as one.
ONE_OF_EACH = ["a.jpg", "a.mp4", "a.pdf", "a.zim"]


def brain_limits() -> Limits:
    """The limits ``POST /v1/plans`` applies (api/routes/plans.py), at the brain's defaults."""
    field = BrainSettings.model_fields
    return Limits(
        field["max_tasks"].default,
        field["max_payload_bytes"].default,
        field["plan_max_tasks"].default,
    )


def _as_submitted(body: bytes, recipe: str, vision: bool) -> bytes:
    """``body`` filled as `submit` fills it: the folders, then the models (an ``| optional``
    one empty when the rig does not pull it, as on the default .env)."""
    body = plan_inputs.fill(body, "inputs/folder", f"outputs/{Path(recipe).stem}/folder")

    def model(m) -> str:
        return "" if m.group(2) and not vision else f"{m.group(1)}-model"

    return plan_inputs.MODEL.sub(model, body.decode()).encode()


def test_the_recipes_are_the_shipped_ones():
    # the parametrized tests below read this list: an empty folder would pass them all
    assert {"video-notes.yaml", "pdf-text.yaml", "photos-captions.yaml", "zim-videos.yaml",
            "zim-articles.yaml"} <= set(SHIPPED)  # fmt: skip


@pytest.mark.parametrize("vision", [True, False], ids=["vision-pulled", "default-env"])
@pytest.mark.parametrize("recipe", SHIPPED)
def test_every_recipe_passes_the_brains_plan_rules(tmp_path, recipe, vision):
    body = _as_submitted((RECIPES / recipe).read_bytes(), recipe, vision)
    assert b"{{ inputs_dir" not in body and b"{{ models." not in body
    content_type = CONTENT_TYPES[Path(recipe).suffix]  # what `submit` sends
    plan, tainted, _ = load_plan(body, content_type, brain_limits(), _folder(tmp_path, ONE_OF_EACH))
    assert plan.fixes == [] and tainted == set()
    groups = [t for t in plan.tasks if t.type == "group"]
    globs = [t for t in groups if "from" not in t.payload["for_each"]]  # `from`: at run time
    assert globs and all(t.payload["items"] for t in globs), "its glob took no file"
    built = [t for t in plan.tasks if t.type != "group"]
    assert built, "no task of the recipe was built and validated"


def _spoil_source(plan: dict, pattern: str) -> None:
    for_each = next(t for t in plan["tasks"] if "for_each" in t)["for_each"]
    for_each["zim" if "zim" in for_each else "glob"] = pattern


def _first_template(plan: dict) -> dict:
    group = next(t for t in plan["tasks"] if "for_each" in t)
    return group["tasks"][0]


BAD_FIELDS = {
    # a typo in a payload key, a task key, a type, a value of the wrong type, a plan key
    "payload key": (lambda plan: _first_template(plan)["payload"].update(dip=200), "payload.dip"),
    "task key": (lambda plan: _first_template(plan).update(retries=3), "retries"),
    "type": (lambda plan: _first_template(plan).update(type="transcript"), "type"),
    "timeout": (lambda plan: _first_template(plan).update(timeout_s="1h"), "timeout_s"),
    "plan key": (lambda plan: plan.update(inputs="~/talks"), "plan"),
    # (a zim recipe's archives are a glob too: the same refusal, its own field)
    "absolute glob": (lambda plan: _spoil_source(plan, "/etc/*"), "for_each.<source>"),
}


@pytest.mark.parametrize("bad", sorted(BAD_FIELDS))
@pytest.mark.parametrize("recipe", SHIPPED)
def test_a_recipe_with_a_bad_field_is_refused_naming_it(tmp_path, recipe, bad):
    spoil, field = BAD_FIELDS[bad]
    field = field.replace("<source>", "zim" if recipe.startswith("zim-") else "glob")
    plan = yaml.safe_load((RECIPES / recipe).read_text())
    spoil(plan)
    body = _as_submitted(yaml.safe_dump(plan, allow_unicode=True).encode(), recipe, True)
    with pytest.raises(PlanInvalid) as refused:
        load_plan(body, "application/yaml", brain_limits(), _folder(tmp_path, ONE_OF_EACH))
    fields = [str(e.get("field")) for e in refused.value.errors]
    assert any(f.endswith(field) for f in fields), fields


@pytest.mark.parametrize("recipe", SHIPPED)
def test_a_recipe_cut_short_is_refused(tmp_path, recipe):
    text = (RECIPES / recipe).read_text()
    body = _as_submitted(text[: text.index("tasks:") + 20].encode(), recipe, True)
    with pytest.raises((PlanSyntaxError, PlanInvalid)):
        load_plan(body, "application/yaml", brain_limits(), _folder(tmp_path, ONE_OF_EACH))


def test_pdf_text_on_the_default_env_reaches_the_brain_with_no_model(tmp_path):
    """The default .env pulls no vision model: `submit` fills pdf-text's optional model
    with "", which the brain refused (`tasks.ocr.payload.model`: at least 1 character)."""
    body = _as_submitted((RECIPES / "pdf-text.yaml").read_bytes(), "pdf-text.yaml", False)
    plan, _, _ = load_plan(body, "application/yaml", brain_limits(), _folder(tmp_path, ["a.pdf"]))
    [group] = [t for t in plan.tasks if t.id == "ocr"]  # a `from` group: items at run time
    [ocr] = [t for t in group.payload["tasks"] if t["type"] == "ocr"]
    assert ocr["payload"]["engine"] == "auto"
    # as the worker reads it once the page is filled in: no model, so not the vision model
    as_run = OcrPayload.model_validate({**ocr["payload"], "image": "outputs/a-pages/1.png"})
    assert as_run.model is None
    # "no model" is not a way round a task that asks for the vision model by name
    vision = body.replace(b"engine: auto", b"engine: vision")
    with pytest.raises(PlanInvalid) as refused:
        load_plan(vision, "application/yaml", brain_limits(), _folder(tmp_path / "v", ["a.pdf"]))
    assert "engine 'vision' needs 'model'" in str(refused.value.errors)
