"""Where tasks write (issue 36 §2): paths filled from item names stay inside outputs/ of
the data volume, and index/ (the brain's search index) is the brain's alone. Each writer
(note, frames, pages) is tried with index/search.sqlite, ../inputs/x, an absolute path and
linked folders; a link standing at a note's own path is replaced, never written through."""

from __future__ import annotations

import pytest
from support_media import make_pdf, make_video

from airig.executors.base import run_task
from airig.executors.context import TaskError, output_file_path, output_folder_path

INDEX_BYTES = b"SQLite format 3\x00 the brain's search index"


@pytest.fixture
def ctx(make_ctx):
    ctx = make_ctx()
    (ctx.data_dir / "index").mkdir()
    (ctx.data_dir / "index" / "search.sqlite").write_bytes(INDEX_BYTES)
    (ctx.data_dir / "inputs").mkdir()
    (ctx.data_dir / "outputs").mkdir()
    return ctx


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> bytes:
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", "160x120").read_bytes()


@pytest.fixture
def sources(ctx, clip):
    """A video and a PDF to read, in inputs/."""
    (ctx.data_dir / "inputs" / "clip.mp4").write_bytes(clip)
    make_pdf(ctx.data_dir / "inputs" / "doc.pdf", [["Page one"]])


def note_payload(path: str) -> dict:
    return {"path": path, "kind": "pages", "pages": "some text"}


# Each writer with where it writes: (task type, payload for a path).
WRITERS = {
    "note": lambda path: ("note", note_payload(path)),
    "frames": lambda path: ("frames", {"video": "inputs/clip.mp4", "out_dir": path}),
    "pages": lambda path: ("pages", {"pdf": "inputs/doc.pdf", "out_dir": path}),
}


def refused(task_type: str, payload: dict, ctx) -> TaskError:
    with pytest.raises(TaskError) as caught:
        run_task(task_type, payload, ctx)
    error = caught.value
    assert error.error_type == "bad_input" and not error.retryable, error.to_dict()
    assert "\n" not in error.message
    return error


def untouched(ctx) -> None:
    """index/ holds the brain's file as it was, and nothing else; inputs/ gained nothing."""
    assert [p.name for p in (ctx.data_dir / "index").iterdir()] == ["search.sqlite"]
    assert (ctx.data_dir / "index" / "search.sqlite").read_bytes() == INDEX_BYTES
    assert sorted(p.name for p in (ctx.data_dir / "inputs").iterdir()) in (
        [],
        ["clip.mp4", "doc.pdf"],
    )


# ------------------------------------------------------------------ index/ and outside outputs/
@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("index/search.sqlite", "is in index/, the brain's search index: no task writes there"),
        ("index", "is in index/, the brain's search index: no task writes there"),
        ("inputs/x", "is not inside outputs/: tasks write only under outputs/ of the data volume"),
        ("x.md", "is not inside outputs/"),
        ("outputs/../index/search.sqlite", "must not contain '..'"),
        ("../inputs/x", "must not contain '..'"),
        ("/data/outputs/x", "relative path inside the data volume"),
    ],
    ids=["index-file", "index", "inputs", "data-root", "dotdot-into-index", "dotdot", "absolute"],
)
def test_a_writer_writes_only_inside_outputs(ctx, sources, writer, path, said):
    task_type, payload = WRITERS[writer](path)
    error = refused(task_type, payload, ctx)
    assert said in error.message
    untouched(ctx)


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize(
    ("leads_to", "said"),
    [
        ("../../index", "is in index/"),
        ("../../inputs", "is not inside outputs/"),
        ("OUTSIDE", "leaves the data volume"),
    ],
    ids=["into-index", "into-inputs", "outside-the-volume"],
)
def test_a_linked_folder_in_outputs_leads_nowhere_else(
    ctx, sources, tmp_path, writer, leads_to, said
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (ctx.data_dir / "outputs" / "talks").mkdir()
    target = str(outside) if leads_to == "OUTSIDE" else leads_to
    (ctx.data_dir / "outputs" / "talks" / "link").symlink_to(target)
    name = "outputs/talks/link/x.md" if writer == "note" else "outputs/talks/link/x"
    task_type, payload = WRITERS[writer](name)
    error = refused(task_type, payload, ctx)
    assert said in error.message
    untouched(ctx)
    assert list(outside.iterdir()) == []


def test_outputs_itself_a_link_into_index_is_refused(ctx, sources):
    (ctx.data_dir / "outputs").rmdir()
    (ctx.data_dir / "outputs").symlink_to("index")
    for writer in WRITERS.values():
        task_type, payload = writer("outputs/x.txt")
        assert "is in index/" in refused(task_type, payload, ctx).message
    untouched(ctx)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_inside_outputs_each_writer_writes(ctx, sources, writer):
    task_type, payload = WRITERS[writer](
        "outputs/talks/clip" + (".txt" if writer == "note" else "")
    )
    output = run_task(task_type, payload, ctx).output
    written = output.get("path") or output["out_dir"]
    assert written.startswith("outputs/talks/clip")
    untouched(ctx)


@pytest.mark.parametrize(
    ("task_type", "payload", "folder"),
    [
        ("frames", {"video": "inputs/clip.mp4"}, "outputs/frames/clip"),
        ("pages", {"pdf": "inputs/doc.pdf"}, "outputs/pages/doc"),
    ],
)
def test_a_default_out_dir_is_inside_outputs(ctx, sources, task_type, payload, folder):
    output = run_task(task_type, payload, ctx).output
    assert output["out_dir"] == folder
    assert (ctx.data_dir / folder).is_dir()


def test_the_path_helpers_refuse_what_the_schema_lets_through(ctx):
    """The executors' own check, whatever validated the payload before."""
    for bad in ("../outputs/x", "/etc/passwd", "outputs/../../x"):
        with pytest.raises(TaskError, match="leaves the data volume"):
            output_file_path(ctx.data_dir, bad, "note path")
        with pytest.raises(TaskError, match="leaves the data volume"):
            output_folder_path(ctx.data_dir, bad, "out_dir")
    for bad in ("outputs", "outputs/", "outputs/."):
        with pytest.raises(TaskError):
            output_file_path(ctx.data_dir, bad, "note path")
    assert (
        output_folder_path(ctx.data_dir, "outputs", "out_dir") == ctx.data_dir.resolve() / "outputs"
    )


# ------------------------------------------------------------------ a link at the note's path
def test_a_link_at_the_notes_path_is_replaced_never_written_through(ctx):
    link = ctx.data_dir / "outputs" / "talk.txt"
    link.symlink_to("../index/search.sqlite")
    output = run_task("note", note_payload("outputs/talk.txt"), ctx).output
    assert output["path"] == "outputs/talk.txt"
    assert not link.is_symlink() and "some text" in link.read_text()
    untouched(ctx)


def test_a_note_path_is_only_the_file_not_a_folder(ctx):
    (ctx.data_dir / "outputs" / "dir").mkdir()
    error = refused("note", note_payload("outputs/dir"), ctx)
    assert "is a folder" in error.message


def test_the_refusal_names_the_fix(ctx):
    error = refused("note", note_payload("notes/talk.md"), ctx)
    assert error.message == (
        "note path 'notes/talk.md' is not inside outputs/: tasks write only under outputs/ "
        "of the data volume"
    )
    assert "outputs/" in error.hint and "{{ outputs_dir }}" in error.hint
