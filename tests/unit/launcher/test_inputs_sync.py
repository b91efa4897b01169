"""`submit --inputs-dir ~/talks`: a host folder goes onto the data volume through the real
file service (served here on a loopback port), only what is not there yet, by hash; and
the plan's {{ inputs_dir }} / {{ outputs_dir }} are filled (issue 25 §3)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from airig.common.errors import AirigError
from airig.launcher import inputs_sync, plan_inputs
from airig.services import infra

TOKEN = "t0ken-for-files"


@pytest.fixture
def service(tmp_path, monkeypatch):
    """The file service over tmp_path/volume on a free port; yields (FileService, root)."""
    root = tmp_path / "volume"
    root.mkdir()
    monkeypatch.setenv("FILES_ROOT", str(root))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(infra.create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the file service did not start"
        time.sleep(0.02)
    yield inputs_sync.FileService(f"http://127.0.0.1:{port}/files", TOKEN), root
    server.should_exit = True
    thread.join(5)


def _talks(tmp_path: Path) -> Path:
    folder = tmp_path / "My Talks"
    folder.mkdir()
    (folder / "a.mp4").write_bytes(b"video a" * 1000)
    (folder / "b talk.mp4").write_bytes(b"video b")
    (folder / ".hidden").write_bytes(b"not sent")
    (folder / "sub").mkdir()
    (folder / "sub" / "c.mp4").write_bytes(b"not sent either")
    return folder


def test_a_folder_is_uploaded_once_and_then_only_what_changed(tmp_path, service):
    files, root = service
    folder = _talks(tmp_path)
    first = inputs_sync.sync(folder, settings=None, service=files)  # type: ignore[arg-type]
    assert first.data_dir == "inputs/My-Talks"
    assert first.uploaded == ["a.mp4", "b talk.mp4"] and first.skipped == []
    assert (root / "inputs/My-Talks/a.mp4").read_bytes() == b"video a" * 1000
    assert sorted(p.name for p in (root / "inputs/My-Talks").iterdir()) == ["a.mp4", "b talk.mp4"]

    second = inputs_sync.sync(folder, settings=None, service=files)  # type: ignore[arg-type]
    assert second.uploaded == [] and second.skipped == ["a.mp4", "b talk.mp4"]

    # Same name, same size, other bytes: the hash tells, and only that file goes again.
    (folder / "b talk.mp4").write_bytes(b"VIDEO B")
    third = inputs_sync.sync(folder, settings=None, service=files)  # type: ignore[arg-type]
    assert third.uploaded == ["b talk.mp4"] and third.skipped == ["a.mp4"]
    assert (root / "inputs/My-Talks/b talk.mp4").read_bytes() == b"VIDEO B"


def test_an_upload_whose_hash_differs_is_refused_and_keeps_the_old_file(tmp_path, service):
    files, root = service
    (root / "inputs").mkdir()
    (root / "inputs/x.bin").write_bytes(b"old")
    source = tmp_path / "x.bin"
    source.write_bytes(b"new")
    with pytest.raises(AirigError) as refused:
        files.put(source, "inputs/x.bin", "0" * 64)
    assert "HTTP 422" in refused.value.message and "sha256" in refused.value.message
    assert (root / "inputs/x.bin").read_bytes() == b"old"
    assert sorted(p.name for p in (root / "inputs").iterdir()) == ["x.bin"]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "f.txt").write_text("x") and p / "f.txt", "is a file"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "holds no files"),
    ],
)
def test_a_folder_that_cannot_be_used_is_one_line_and_nothing_is_sent(tmp_path, service, make,
                                                                      words):  # fmt: skip
    files, root = service
    with pytest.raises(AirigError) as refused:
        inputs_sync.sync(make(tmp_path), settings=None, service=files)  # type: ignore[arg-type]
    assert words in refused.value.message and "\n" not in refused.value.message
    assert list(root.iterdir()) == []


def test_a_file_service_that_is_down_is_one_line(tmp_path):
    down = inputs_sync.FileService("http://127.0.0.1:9/files", TOKEN)
    with pytest.raises(AirigError) as refused:
        inputs_sync.sync(_talks(tmp_path), settings=None, service=down)  # type: ignore[arg-type]
    assert "cannot reach the file service" in refused.value.message
    assert "start_services.py up" in refused.value.hint


def test_the_plan_placeholders_are_filled_and_the_brains_templates_kept(tmp_path):
    body = (
        b"tasks:\n  - id: talks\n    for_each: {glob: '{{ inputs_dir }}/*.mp4'}\n"
        b"    path: '{{outputs_dir}}/{{ item.stem }}.md {{ tasks.a.output }}'\n"
    )
    assert plan_inputs.needs_inputs(body)
    outputs = plan_inputs.outputs_dir(Path("recipes/video-notes.yaml"), "inputs/talks")
    assert outputs == "outputs/video-notes/talks"
    filled = plan_inputs.fill(body, "inputs/talks", outputs).decode()
    assert "glob: 'inputs/talks/*.mp4'" in filled
    assert "'outputs/video-notes/talks/{{ item.stem }}.md {{ tasks.a.output }}'" in filled
    assert not plan_inputs.needs_inputs(filled.encode())


@pytest.mark.parametrize("bad", ["../etc", "inputs/../../x", "/abs", "in puts", ".", ""])
def test_a_data_volume_folder_must_stay_inside(bad):
    with pytest.raises(AirigError) as refused:
        plan_inputs.data_relative(bad)
    assert "not a folder of the data volume" in refused.value.message


def test_names_that_would_clash_on_the_volume_are_refused(tmp_path, service):
    files, root = service
    folder = tmp_path / "clash"
    folder.mkdir()
    (folder / "a\tb.mp4").write_bytes(b"1")  # a control character becomes -
    (folder / "a-b.mp4").write_bytes(b"2")
    with pytest.raises(AirigError) as refused:
        inputs_sync.sync(folder, settings=None, service=files)  # type: ignore[arg-type]
    assert "same name on the data volume" in refused.value.message
    assert "a\\tb.mp4" in refused.value.message and "\t" not in refused.value.message
    assert list(root.iterdir()) == []


# ------------------------------------------------------------------ the upload limit
@pytest.fixture
def limited(monkeypatch, request):
    """The file service with FILES_MAX_UPLOAD_BYTES=100."""
    monkeypatch.setenv("FILES_MAX_UPLOAD_BYTES", "100")
    return request.getfixturevalue("service")


def _over(tmp_path: Path) -> Path:
    folder = tmp_path / "talks"
    folder.mkdir()
    (folder / "a small one.txt").write_bytes(b"fits")
    (folder / "Café talk.mp4").write_bytes(b"v" * 250)
    return folder


def test_a_file_over_the_upload_limit_is_refused_first_in_a_line_that_needs_no_log(
    tmp_path, limited
):
    """The upload-limit error named a log with nothing in it (issue 35 §5): it says the
    file, its size, the limit and the knob, and nothing of the folder is sent."""
    files, root = limited
    assert files.limit() == 100
    with pytest.raises(AirigError) as refused:
        inputs_sync.sync(_over(tmp_path), settings=None, service=files)  # type: ignore[arg-type]
    error = refused.value
    assert error.message == (
        "Café talk.mp4 (250 bytes) is over the file service's upload limit of 100 bytes; "
        "nothing was uploaded"
    )
    assert error.hint == (
        "raise it: FILES_MAX_UPLOAD_BYTES=1073741824 in .env, then `python start_services.py "
        "up`; or split the file"
    )
    assert "log" not in error.message + error.hint
    assert not (root / "inputs").exists() or list((root / "inputs").rglob("*")) == []


def test_a_413_all_the_same_says_the_limit_and_the_service_logs_it(
    tmp_path, limited, monkeypatch, capsys
):
    """A limit lowered after the check (or a service that does not say it): the 413
    makes the same line, the limit from its header; the service's log has the refusal."""
    files, root = limited
    monkeypatch.setattr(files, "limit", lambda: None)
    with pytest.raises(AirigError) as refused:
        inputs_sync.sync(_over(tmp_path), settings=None, service=files)  # type: ignore[arg-type]
    error = refused.value
    assert error.message == (
        "Café talk.mp4 (250 bytes) is over the file service's upload limit of 100 bytes"
    )
    assert "FILES_MAX_UPLOAD_BYTES=1073741824" in error.hint and "log" not in error.hint
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()
              if line.startswith("{")]  # fmt: skip
    [line] = [entry for entry in logged if entry.get("event") == "upload.refused"]
    assert (line["path"], line["status"]) == ("inputs/talks/Café talk.mp4", 413)
    assert "250 bytes" in line["detail"] and "FILES_MAX_UPLOAD_BYTES" in line["detail"]


def test_another_refusal_names_the_log_that_has_it(tmp_path, service, capsys):
    files, _root = service
    source = tmp_path / "x.bin"
    source.write_bytes(b"new")
    with pytest.raises(AirigError) as refused:
        files.put(source, "inputs/x.bin", "0" * 64)  # not its sha256: 422
    assert "logs files` has the refusal" in refused.value.hint
    out = capsys.readouterr().out
    logged = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(e["event"], e["path"], e["status"]) for e in logged] == [
        ("upload.refused", "inputs/x.bin", 422)
    ]


def test_a_listing_refusal_names_no_log(tmp_path, service):
    files, _root = service
    files.headers = {"Authorization": "Bearer not-the-token"}
    with pytest.raises(AirigError) as refused:
        files.hashes("inputs/talks")
    assert "HTTP 401" in refused.value.message and "logs" not in refused.value.hint


def test_sizes_read_as_people_read_them():
    assert inputs_sync._size(9 * 1024**3 + 1) == "9.0 GiB, 9663676417 bytes"
    assert inputs_sync._size(8 * 1024**3) == "8.0 GiB, 8589934592 bytes"
    assert inputs_sync._size(1536) == "1.5 KiB, 1536 bytes"
    assert inputs_sync._size(1023) == "1023 bytes"


@pytest.mark.parametrize("answer", ['{"max_upload_bytes": "100"}', '{"max_upload_bytes": true}',
                                    "[1]", "not json", '{"status": "ok"}'])  # fmt: skip
def test_a_health_answer_without_a_number_is_no_limit(monkeypatch, answer):
    import requests

    class Answer:
        def json(self):
            import json as j

            return j.loads(answer)

    monkeypatch.setattr(requests, "get", lambda *_a, **_k: Answer())
    assert inputs_sync.FileService("http://127.0.0.1:9/files", TOKEN).limit() is None
