"""A csv note's columns (issue 35 §5): a header a person reads (``{file: item.name}``)
instead of the field path, the photos recipe's sheet headed as README says, and columns a
plan may not give."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from airig.brain.plans.load import load_plan
from airig.brain.plans.validate import Limits
from airig.common.task_schemas import NotePayload
from airig.executors.base import run_task
from airig.launcher import plan_inputs

ROOT = Path(__file__).resolve().parents[3]
# a fan-out group's output as the brain hands it to the csv task: one photo captioned,
# one whose item failed
ITEMS = {
    "items": [
        {"index": 0, "item": {"name": "東京.jpg", "path": "inputs/p/東京.jpg"},
         "state": "SUCCEEDED", "output": {"text": '{"caption": "a street", "tags": ["city"]}'},
         "error": None},
        {"index": 1, "item": {"name": "broken.jpg", "path": "inputs/p/broken.jpg"},
         "state": "FAILED", "output": None, "error": {"message": "not an image"}},
    ]
}  # fmt: skip


def sheet(ctx, columns: list) -> list[list[str]]:
    payload = {"path": "outputs/c.csv", "kind": "csv", "rows": ITEMS, "columns": columns}
    run_task("note", payload, ctx)
    text = (ctx.data_dir / "outputs" / "c.csv").read_text(encoding="utf-8-sig")
    return list(csv.reader(io.StringIO(text)))


def test_a_column_may_name_its_header(make_ctx):
    rows = sheet(make_ctx(), [{"file": "item.name"}, "caption", {"path": "item.path"}])
    assert rows == [
        ["file", "caption", "path", "error"],
        ["東京.jpg", "a street", "inputs/p/東京.jpg", ""],
        ["broken.jpg", "", "inputs/p/broken.jpg", "not an image"],
    ]
    # a field path alone is its own header, as before
    assert sheet(make_ctx(), ["item.name"])[0] == ["item.name", "error"]


def test_the_photos_recipes_sheet_has_the_header_readme_gives(make_ctx, tmp_path):
    """README said `captions.csv` (file, caption, tags, error); the sheet's header was
    `item.name`. The recipe as the brain loads it, its csv task run on a group's output."""
    body = (ROOT / "recipes" / "photos-captions.yaml").read_bytes()
    body = plan_inputs.fill(body, "inputs/photos", "outputs/photos-captions/photos")
    body = plan_inputs.MODEL.sub(lambda m: f"{m.group(1)}-model", body.decode()).encode()
    data = tmp_path / "volume"
    (data / "inputs" / "photos").mkdir(parents=True)
    (data / "inputs" / "photos" / "a.jpg").write_bytes(b"x")
    plan, _, _ = load_plan(body, "application/yaml", Limits(), data)
    columns = next(t for t in plan.tasks if t.id == "csv").payload["columns"]
    header = sheet(make_ctx(), columns)[0]
    readme = (ROOT / "README.md").read_text()
    [said] = re.findall(r"`captions\.csv` \(([^)]*)\)", readme)
    assert header == [c.strip() for c in said.split(",")]
    assert header[0] == "file"


@pytest.mark.parametrize(
    "column",
    [
        {"file": "item.name", "also": "caption"},  # one header, one path
        {},
        {"": "item.name"},
        {"file": ""},
        {"file": ["item.name"]},
        {"file": {"nested": "item.name"}},
        {"x" * 201: "item.name"},
        ["item.name"],
        3,
    ],
)
def test_a_column_that_is_not_a_path_or_one_header_is_refused(column):
    with pytest.raises(ValidationError):
        NotePayload.model_validate(
            {"path": "c.csv", "kind": "csv", "rows": ITEMS, "columns": [column]}
        )


def test_a_header_never_runs_as_a_formula(make_ctx):
    header = sheet(make_ctx(), [{'=HYPERLINK("http://x")': "item.name"}, {"-1+1": "caption"}])[0]
    assert header == ['\'=HYPERLINK("http://x")', "'-1+1", "error"]
