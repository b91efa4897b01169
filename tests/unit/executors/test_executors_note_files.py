"""A note's file (issue 36 §2): written through a temporary file of a random name,
created O_EXCL|O_NOFOLLOW in the note's folder and renamed over the note, so a link
standing where the temporary file goes is never written through and none is left behind;
a CSV's headers are kept from running as formulas as its cells are, and only a plain
decimal number is taken for one."""

from __future__ import annotations

import csv
import io
import os

import pytest

from airig.executors import note
from airig.executors.base import run_task
from airig.executors.context import TaskError


@pytest.fixture
def ctx(make_ctx):
    ctx = make_ctx()
    (ctx.data_dir / "outputs").mkdir()
    return ctx


def note_payload(path: str) -> dict:
    return {"path": path, "kind": "pages", "pages": "some text"}


def test_a_link_where_the_old_temporary_file_stood_is_left_alone(ctx, tmp_path):
    """The temporary name was fixed (.talk.txt.partial) and written through a link."""
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    trap = ctx.data_dir / "outputs" / ".talk.txt.partial"
    trap.symlink_to(outside)
    run_task("note", note_payload("outputs/talk.txt"), ctx)
    assert outside.read_text() == "kept" and trap.is_symlink()
    assert "some text" in (ctx.data_dir / "outputs" / "talk.txt").read_text()


def test_the_temporary_file_is_created_exclusively_and_never_through_a_link(
    ctx, tmp_path, monkeypatch
):
    """Should a link stand at the very name chosen, the note fails: O_EXCL|O_NOFOLLOW."""
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    monkeypatch.setattr(note.secrets, "token_hex", lambda n: "f" * (2 * n))
    (ctx.data_dir / "outputs" / f".{'f' * 16}.partial").symlink_to(outside)
    with pytest.raises(TaskError):
        run_task("note", note_payload("outputs/talk.txt"), ctx)
    assert outside.read_text() == "kept"
    assert not (ctx.data_dir / "outputs" / "talk.txt").exists()


def test_no_temporary_file_is_left_behind(ctx, monkeypatch):
    run_task("note", note_payload("outputs/a.txt"), ctx)
    assert sorted(p.name for p in (ctx.data_dir / "outputs").iterdir()) == ["a.txt"]

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(note.os, "replace", failing)
    with pytest.raises(TaskError):
        run_task("note", note_payload("outputs/b.txt"), ctx)
    assert sorted(p.name for p in (ctx.data_dir / "outputs").iterdir()) == ["a.txt"]


def test_a_note_keeps_the_usual_file_mode(ctx):
    run_task("note", note_payload("outputs/a.txt"), ctx)
    umask = os.umask(0)
    os.umask(umask)
    assert (ctx.data_dir / "outputs" / "a.txt").stat().st_mode & 0o777 == 0o666 & ~umask


# ------------------------------------------------------------------ CSV headers and cells
def test_csv_headers_and_cells_never_run_as_formulas(ctx):
    hostile = "=cmd|' /C calc'!A0"
    rows = [{"v": hostile, "n": "-inf", "m": "-3", "e": "+1.5e3", "u": "-1_000", "t": "\t=1"}]
    columns = [{hostile: "v"}, "n", "m", "e", "u", "t", {"@SUM(A1)": "m"}, hostile]
    payload = {"path": "outputs/s.csv", "kind": "csv", "rows": rows, "columns": columns}
    run_task("note", payload, ctx)
    text = (ctx.data_dir / "outputs" / "s.csv").read_text(encoding="utf-8-sig")
    header, row = list(csv.reader(io.StringIO(text)))
    assert header == ["'" + hostile, "n", "m", "e", "u", "t", "'@SUM(A1)", "'" + hostile]
    # plain numbers stay numbers; what only Python reads as one (-inf, -1_000) is quoted
    assert row == ["'" + hostile, "'-inf", "-3", "+1.5e3", "'-1_000", "'\t=1", "-3", ""]
