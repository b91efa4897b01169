"""The worker's own check of where a task writes (issue 36 §2, last item), whatever the
brain rendered: a link inside a folder of outputs/ cannot lead the write into another
folder of outputs/ (another plan's), and a NUL or a loop of links in the path fails the
task as bad_input in one line (not a retried executor_error). The brain's rule, what a
template fills stays in its plan's folder, is in tests/unit/brain/test_plan_folders.py."""

from __future__ import annotations

import pytest
from support_media import make_pdf, make_video

from airig.executors.base import run_task
from airig.executors.context import TaskError


@pytest.fixture
def ctx(make_ctx):
    ctx = make_ctx()
    for folder in ("index", "inputs", "outputs/talks", "outputs/other"):
        (ctx.data_dir / folder).mkdir(parents=True)
    (ctx.data_dir / "outputs" / "other" / "keep.md").write_text("another plan's note")
    return ctx


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> bytes:
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", "160x120").read_bytes()


@pytest.fixture
def sources(ctx, clip):
    (ctx.data_dir / "inputs" / "clip.mp4").write_bytes(clip)
    make_pdf(ctx.data_dir / "inputs" / "doc.pdf", [["Page one"]])


WRITERS = {
    "note": lambda path: ("note", {"path": path + ".md", "kind": "pages", "pages": "text"}),
    "frames": lambda path: ("frames", {"video": "inputs/clip.mp4", "out_dir": path}),
    "pages": lambda path: ("pages", {"pdf": "inputs/doc.pdf", "out_dir": path}),
}


def refused(task_type: str, payload: dict, ctx) -> TaskError:
    with pytest.raises(TaskError) as caught:
        run_task(task_type, payload, ctx)
    error = caught.value
    assert error.error_type == "bad_input" and not error.retryable, error.to_dict()
    assert "\n" not in error.message and "\x00" not in error.message
    return error


def other_untouched(ctx) -> None:
    other = ctx.data_dir / "outputs" / "other"
    assert [p.name for p in other.iterdir()] == ["keep.md"]
    assert (other / "keep.md").read_text() == "another plan's note"


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_link_in_a_plans_folder_cannot_lead_into_another_plans_folder(ctx, sources, writer):
    (ctx.data_dir / "outputs" / "talks" / "link").symlink_to("../other")
    task_type, payload = WRITERS[writer]("outputs/talks/link/keep")
    error = refused(task_type, payload, ctx)
    assert "leads through a link out of outputs/talks/" in error.message
    assert "'outputs/other/keep" in error.message
    other_untouched(ctx)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_plans_folder_that_is_itself_a_link_within_outputs_is_written(ctx, sources, writer):
    # outputs/talks -> real/talks: the folder the path names, wherever it really is
    (ctx.data_dir / "outputs" / "real").mkdir()
    (ctx.data_dir / "outputs" / "talks").rmdir()
    (ctx.data_dir / "outputs" / "talks").symlink_to("real")
    task_type, payload = WRITERS[writer]("outputs/talks/clip")
    run_task(task_type, payload, ctx)
    assert (
        ctx.data_dir / "outputs" / "real" / ("clip.md" if writer == "note" else "clip")
    ).exists()
    other_untouched(ctx)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_nul_in_the_path_is_bad_input_not_a_retried_crash(ctx, sources, writer):
    task_type, payload = WRITERS[writer]("outputs/talks/a\x00b")
    error = refused(task_type, payload, ctx)
    assert "holds a NUL byte" in error.message and "\\x00" in error.message


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_loop_of_links_is_bad_input_not_a_retried_crash(ctx, sources, writer):
    (ctx.data_dir / "outputs" / "talks" / "loop").symlink_to("loop")
    task_type, payload = WRITERS[writer]("outputs/talks/loop/x")
    error = refused(task_type, payload, ctx)
    assert "cannot be looked up" in error.message


def test_a_hostile_name_in_a_plans_folder_stays_there(ctx, sources):
    # look-alikes of '..' and '/' are plain names on the volume: inside the folder
    name = "\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fother"
    output = run_task("note", WRITERS["note"](f"outputs/talks/{name}")[1], ctx).output
    assert output["path"] == f"outputs/talks/{name}.md"
    assert (ctx.data_dir / "outputs" / "talks" / f"{name}.md").is_file()
    other_untouched(ctx)
