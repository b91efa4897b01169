"""Fan-out over a ZIM archive's entries (``for_each: {zim: ..., mimetype: ..., path: ...}``,
``plans/zim.py``): archives made here with libzim's own writer. What the items hold, the
filters, extraction once by content hash, and what a hostile archive or a full disk does:
a truncated or non-ZIM file, a huge entry count under the fan-out's caps, entry paths that
try to leave the extraction folder, a link out of the volume, a disk that fills."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient
from support_zim import ARTICLES, make_zim

from airig.brain.api.app import create_app
from airig.brain.plans import zim
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.validate import Limits, PlanInvalid

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
VIDEO = ("videos/talk.webm", "A talk", "video/webm", b"\x1a\x45\xdf\xa3 not much of a video")
ENTRIES = "inputs/wiki/.wiki.zim.entries"


def template(*extra):
    return [{"id": "text", "type": "html", "task_class": "cpu",
             "payload": {"html": "{{ item.path }}", "path": "outputs/wiki/{{ item.stem }}.txt",
                         "title": "{{ item.title }}",
                         "source": "{{ item.archive }}/{{ item.entry }}"}}, *extra]  # fmt: skip


def expand(data, for_each, plan_max=5000, tasks=None):
    group = {"id": "g", "for_each": for_each, "tasks": tasks or template()}
    return validate_with_fanout({"name": "z", "tasks": [group]}, Limits(plan_max_tasks=plan_max),
                                data)  # fmt: skip


def items_of(plan):
    return next(t for t in plan.tasks if t.id == "g").payload["items"]


def archive(tmp_path, entries, redirects=(), name="wiki.zim"):
    data = tmp_path / "data"
    make_zim(data / "inputs" / "wiki" / name, entries, redirects)
    return data


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def one_refusal(excinfo) -> dict:
    (error,) = excinfo.value.errors
    assert "\n" not in error["message"] and len(error["message"]) < 400, error
    return error


# ------------------------------------------------------------------ the happy path
def test_items_are_the_matching_entries_extracted_once_with_their_path_and_title(tmp_path):
    data = archive(tmp_path, [*ARTICLES, VIDEO], redirects=[("Vulcano", "Vulcano", "Volcano")])
    plan, _ = expand(data, {"zim": "inputs/wiki/*.zim", "mimetype": "text/html"})
    items = items_of(plan)
    # path order, the redirect and the video left out
    assert [i["entry"] for i in items] == ["Glacier", "Volcano", "Water_purification"]
    water = items[2]
    assert water["title"] == "Water purification" and water["mimetype"] == "text/html"
    assert water["archive"] == "inputs/wiki/wiki.zim" and water["name"] == "Water_purification.html"
    content = ARTICLES[2][3].encode()
    digest = hashlib.sha256(content).hexdigest()
    assert water["path"] == f"{ENTRIES}/{digest}/Water_purification.html"
    assert water["sha256"] == digest and water["bytes"] == len(content)
    assert (data / water["path"]).read_bytes() == content
    # the template got the item's fields; the group's row keeps its filters
    task = next(t for t in plan.tasks if t.id == "g__2__text")
    assert task.payload["title"] == "Water purification"
    assert task.payload["source"] == "inputs/wiki/wiki.zim/Water_purification"
    assert task.payload["path"] == "outputs/wiki/Water_purification.txt"
    group = next(t for t in plan.tasks if t.id == "g")
    assert group.payload["for_each"] == {"zim": "inputs/wiki/*.zim", "mimetype": "text/html"}


def test_mimetype_and_path_filters(tmp_path):
    data = archive(tmp_path, [*ARTICLES, VIDEO, ("videos/b.mp4", "B", "video/mp4", b"mp4"),
                              ("img/a.png", "a", "image/png", b"png")])  # fmt: skip
    videos = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim", "mimetype": "video/*"})[0])
    assert [i["entry"] for i in videos] == ["videos/b.mp4", "videos/talk.webm"]
    assert videos[1]["suffix"] == ".webm" and videos[1]["stem"] == "videos_talk"
    # a literal start reads only its part of the archive (entries are in path order)
    part = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim", "path": "Water*"})[0])
    assert [i["entry"] for i in part] == ["Water_purification"]
    every = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim", "path": "*a*"})[0])
    assert [i["entry"] for i in every] == ["Glacier", "Volcano", "Water_purification",
                                           "img/a.png", "videos/talk.webm"]  # fmt: skip
    upper = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim", "mimetype": "TEXT/HTML"})[0])
    assert len(upper) == 3  # a MIME type's case does not matter
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/wiki.zim", "path": "Nothing*"})
    assert one_refusal(refused)["message"] == (
        "zim 'inputs/wiki/wiki.zim', path 'Nothing*' matched nothing (0 items)"
    )


def test_the_source_is_spelled_like_the_others(tmp_path):
    data = archive(tmp_path, ARTICLES)
    for for_each, words in [
        ({"glob": "inputs/*", "mimetype": "text/html"}, "only zim takes filters"),
        ({"zim": "inputs/wiki/wiki.zim", "lang": "en"}, "only zim takes filters"),
        ({"zim": "inputs/wiki/wiki.zim", "glob": "x"}, "exactly one of glob, items, from, zim"),
        ({"zim": ["inputs/wiki/wiki.zim"]}, "a zim is a text pattern"),
        ({"zim": "inputs/wiki/wiki.zim", "mimetype": 3}, "mimetype is a text pattern"),
        ({"zim": "/etc/*.zim"}, "relative to the data volume"),
        ({"zim": "inputs/../../x.zim"}, "relative to the data volume"),
    ]:
        with pytest.raises(PlanInvalid) as refused:
            expand(data, for_each)
        assert words in str(refused.value.errors), (for_each, refused.value.errors)


def test_item_values_from_an_archive_are_data_never_templates(tmp_path):
    title = "{{ tasks.secret.output }} and \u202egpj.exe"
    data = archive(tmp_path, [("a/b", title, "text/html", "<p>x</p>")])
    (item,) = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim"})[0])
    assert "{{" not in item["title"] and "\u202e" not in item["title"]
    assert item["title"].startswith("{ { tasks.secret.output }}")


# ------------------------------------------------------------------ hostile archives
@pytest.mark.parametrize("content", [b"", b"hello, not an archive\n", b"ZIM\x04" + b"\0" * 70],
                         ids=["empty", "text", "header-only"])  # fmt: skip
def test_a_file_that_is_no_zim_archive_is_refused_in_one_line(tmp_path, content):
    data = tmp_path / "data"
    (data / "inputs" / "wiki").mkdir(parents=True)
    (data / "inputs" / "wiki" / "wiki.zim").write_bytes(content)
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/*.zim"})
    error = one_refusal(refused)
    assert error["task"] == "g" and error["field"] == "for_each.zim"
    assert "inputs/wiki/wiki.zim" in error["message"] and "not a readable ZIM" in error["message"]


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_a_truncated_archive_is_refused_in_one_line_and_nothing_is_extracted(tmp_path, keep):
    data = archive(tmp_path, [*ARTICLES, VIDEO])
    path = data / "inputs" / "wiki" / "wiki.zim"
    whole = path.read_bytes()
    path.write_bytes(whole[: int(len(whole) * keep)])
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/*.zim"})
    assert "wiki.zim" in one_refusal(refused)["message"]
    assert files_under(data) == {"inputs/wiki/wiki.zim"}


def test_a_huge_entry_count_meets_the_fan_outs_cap_before_anything_is_extracted(tmp_path):
    many = [(f"A/{n:05d}", f"Page {n}", "text/html", f"<p>page {n}</p>") for n in range(3000)]
    data = archive(tmp_path, many)
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/wiki.zim"}, plan_max=200)
    error = one_refusal(refused)
    assert "AIRIG_PLAN_MAX_TASKS" in error["message"] and "+ items x 1 tasks" in error["message"]
    assert files_under(data) == {"inputs/wiki/wiki.zim"}  # refused from the count alone
    # within the cap, every one (a part of the archive, by its literal start)
    plan, _ = expand(data, {"zim": "inputs/wiki/wiki.zim", "path": "A/001*"}, plan_max=200)
    assert [i["entry"] for i in items_of(plan)] == [f"A/{n:05d}" for n in range(100, 200)]


def test_a_filter_that_reads_too_far_is_refused(tmp_path, monkeypatch):
    data = archive(tmp_path, [(f"A/{n:03d}", "p", "text/html", "<p>x</p>") for n in range(50)])
    monkeypatch.setattr(zim, "MAX_SCANNED", 20)
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/wiki.zim", "mimetype": "video/*"})
    assert "20 entries read" in one_refusal(refused)["message"]


def test_an_entry_too_large_to_read_is_refused_naming_it(tmp_path, monkeypatch):
    data = archive(tmp_path, [*ARTICLES, VIDEO])
    monkeypatch.setattr(zim, "MAX_ENTRY_BYTES", 10)
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/wiki.zim", "mimetype": "video/*"})
    assert "'videos/talk.webm' is 24 bytes, over 10" in one_refusal(refused)["message"]


HOSTILE = [
    "../../../../escaped", "/abs/olute", "a/../../b", "..", ".", "./.hidden",
    "nul\x00inside", "ctl\x01\x1fchars", "bidi\u202egpj.exe", "\uff0e\uff0e\uff0fwide",
    "x" * 600, "Ελληνικά" * 40, "a\\..\\..\\win", "~/home", "trailing/",
]  # fmt: skip


def test_entry_paths_never_leave_the_extraction_folder(tmp_path):
    entries = [(p, f"t{n}", "text/html", f"<p>{n}</p>") for n, p in enumerate(HOSTILE)]
    data = archive(tmp_path, entries)
    plan, _ = expand(data, {"zim": "inputs/wiki/wiki.zim"})
    items = items_of(plan)
    assert len(items) == len(HOSTILE)
    folder = (data / ENTRIES).resolve()
    for item in items:
        real = (data / item["path"]).resolve()
        assert real.parent.parent == folder, item["path"]
        name = real.name
        assert not name.startswith(".") and "/" not in name and "\x00" not in name
        assert len(name.encode()) <= 120 and name.isprintable(), name
        assert not any(c in name for c in "\\\u202e\uff0e\uff0f~"), name
    assert files_under(data) == {"inputs/wiki/wiki.zim", *(i["path"] for i in items)}
    assert len({i["path"] for i in items}) == len(items)  # two names that meet get an index
    assert {i["stem"] for i in items} >= {"escaped", "abs_olute", "a_b", "a_win", "home"}


def test_extraction_is_idempotent_by_content_hash(tmp_path):
    data = archive(tmp_path, [*ARTICLES, ("Copy", "Copy", "text/html", ARTICLES[0][3])])
    first = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim"})[0])
    stats = {i["path"]: os.stat(data / i["path"]) for i in first}
    again = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim"})[0])
    assert again == first
    for item in again:  # not written again: the same file, untouched
        now = os.stat(data / item["path"])
        assert (now.st_ino, now.st_mtime_ns) == (stats[item["path"]].st_ino,
                                                 stats[item["path"]].st_mtime_ns)  # fmt: skip
    # the same content under two paths: one folder (its hash), a name each
    copy, volcano = (next(i for i in again if i["entry"] == e) for e in ("Copy", "Volcano"))
    assert copy["sha256"] == volcano["sha256"] and copy["dir"] == volcano["dir"]
    # a file a crash left short (not the content's size) is written again, whole
    target = data / volcano["path"]
    target.write_bytes(b"short")
    items_of(expand(data, {"zim": "inputs/wiki/wiki.zim"})[0])
    assert target.read_bytes() == ARTICLES[0][3].encode()


def test_a_full_disk_during_extraction_leaves_no_partial_file(tmp_path, monkeypatch):
    data = archive(tmp_path, [*ARTICLES, VIDEO])
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(zim.os, "fsync", full)
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/wiki.zim"})
    message = one_refusal(refused)["message"]
    assert "No space left on device" in message and "free space" in message
    left = files_under(data)
    assert left == {"inputs/wiki/wiki.zim"}, left  # no .partial, no file under its name
    monkeypatch.setattr(zim.os, "fsync", real_fsync)
    items = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim"})[0])  # room again: all of it
    assert all((data / i["path"]).stat().st_size == i["bytes"] for i in items)


class _Disk:
    """A data volume with ``free`` bytes left: a file's write takes what fits, then the
    kernel's ENOSPC, as a full disk answers (part of the data written, then the error)."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.real_fdopen = os.fdopen

    def fdopen(self, fd, mode):
        disk, handle = self, self.real_fdopen(fd, mode)

        class Limited:
            def __enter__(self):
                handle.__enter__()
                return self

            def __exit__(self, *exc):
                return handle.__exit__(*exc)

            def write(self, data):
                room = min(len(data), disk.free)
                handle.write(data[:room])
                disk.free -= room
                if room < len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return room

            def __getattr__(self, name):
                return getattr(handle, name)

        return Limited()


def test_a_disk_that_fills_in_the_middle_of_an_entry_keeps_only_whole_files(tmp_path, monkeypatch):
    data = archive(tmp_path, [*ARTICLES, VIDEO])
    # in path order Glacier, Volcano, then Water_purification
    first_two = len(ARTICLES[1][3].encode()) + len(ARTICLES[0][3].encode())
    disk = _Disk(first_two + 5)  # the third entry meets the end of the disk 5 bytes in
    monkeypatch.setattr(zim.os, "fdopen", disk.fdopen)
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/wiki.zim"})
    assert "No space left on device" in one_refusal(refused)["message"]
    left = files_under(data) - {"inputs/wiki/wiki.zim"}
    assert len(left) == 2 and not any(".partial" in p for p in left), left
    whole = {a[3].encode() for a in ARTICLES}
    assert all((data / p).read_bytes() in whole for p in left)  # each one whole
    monkeypatch.setattr(zim.os, "fdopen", disk.real_fdopen)
    items = items_of(expand(data, {"zim": "inputs/wiki/wiki.zim"})[0])
    assert len(items) == 4 and files_under(data) == {"inputs/wiki/wiki.zim",
                                                     *(i["path"] for i in items)}  # fmt: skip


def test_a_read_only_volume_is_one_line(reachable_tmp):
    from support import unprivileged

    data = archive(reachable_tmp, ARTICLES)
    for folder in (data, data / "inputs"):
        folder.chmod(0o755)
    (data / "inputs" / "wiki").chmod(0o555)

    def attempt():
        try:
            expand(data, {"zim": "inputs/wiki/wiki.zim"})
        except PlanInvalid as exc:
            raise RuntimeError(exc.errors[0]["message"]) from None

    try:
        outcome = unprivileged(attempt)
    finally:
        (data / "inputs" / "wiki").chmod(0o755)
    assert outcome is not None and outcome[0] == "RuntimeError", outcome
    assert "make it writable" in outcome[1] and "\n" not in outcome[1]
    assert files_under(data) == {"inputs/wiki/wiki.zim"}


def test_an_extraction_folder_linked_out_of_the_volume_is_refused(tmp_path):
    data = archive(tmp_path, ARTICLES)
    outside = tmp_path / "outside"
    outside.mkdir()
    (data / ENTRIES).symlink_to(outside)
    with pytest.raises(PlanInvalid) as refused:
        expand(data, {"zim": "inputs/wiki/wiki.zim"})
    assert "leads out of the data volume" in one_refusal(refused)["message"]
    assert list(outside.iterdir()) == []


def test_http_submission_of_a_non_zim_file_is_a_422_naming_the_group(tmp_path):
    data = tmp_path / "data"
    (data / "inputs").mkdir(parents=True)
    (data / "inputs" / "ted.zim").write_text("<html>a page saved as .zim</html>")
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, BRAIN_DATA_DIR=str(data))
    plan = ("name: ted\ntasks:\n  - id: talks\n    for_each: {zim: 'inputs/*.zim', "
            "mimetype: 'video/*'}\n    tasks:\n      - {id: t, type: noop, payload: "
            "{echo: '{{ item.title }}'}}\n")  # fmt: skip
    with TestClient(create_app(settings)) as client:
        headers = {**ADMIN, "Content-Type": "application/yaml"}
        answer = client.post("/v1/plans", headers=headers, content=plan)
        assert answer.status_code == 422
        (error,) = answer.json()["detail"]["errors"]
        assert error["task"] == "talks" and "inputs/ted.zim" in error["message"]
        make_zim(data / "inputs" / "ted.zim", [VIDEO])
        answer = client.post("/v1/plans", headers=headers, content=plan)
        assert answer.status_code == 201, answer.text
        tasks = {t["id"]: t for t in answer.json()["tasks"]}
        assert tasks["talks__0__t"]["group"] == "talks"
