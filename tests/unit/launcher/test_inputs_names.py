"""Input names on the data volume (issue 35 §4): a user's file keeps its name, Unicode
and all, less only what is unsafe there; four all-non-ASCII names are four names."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from airig.brain.plans.fanout import glob_items
from airig.common.errors import AirigError
from airig.common.task_schemas import relative_data_path
from airig.executors.media import safe_stem
from airig.launcher import inputs_sync
from airig.launcher.inputs_sync import NAME_BYTES, data_folder_for, volume_name


class FakeService:
    """What sync asks of the file service, writing under a folder as the real one does."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def hashes(self, data_dir: str) -> dict[str, str | None]:
        return {}

    def limit(self) -> int | None:
        return None  # as an older kit's service: no limit said

    def put(self, path: Path, rel: str, sha256: str) -> None:
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())


@pytest.mark.parametrize(
    "name",
    ["Café résumé – ünïcode talk.mp4", "東京.jpg", "Москва 2024.pdf", "مرحبا.png",
     "नमस्ते.mp4", "a b (1).mp4", "émoji 🎉.jpg"],
)  # fmt: skip
def test_a_unicode_name_is_kept(name):
    assert volume_name(name) == name
    relative_data_path(f"inputs/talks/{volume_name(name)}")  # a payload accepts it


def test_four_all_non_ascii_names_are_four_files_named_after_the_users(tmp_path):
    folder = tmp_path / "写真"
    folder.mkdir()
    names = ["東京.jpg", "大阪.jpg", "Café résumé – ünïcode talk.mp4", "Ελλάδα.jpg"]
    for name in names:
        (folder / name).write_bytes(name.encode())
    root = tmp_path / "volume"
    synced = inputs_sync.sync(folder, settings=None, service=FakeService(root))  # type: ignore[arg-type]
    assert synced.data_dir == "inputs/写真"
    assert sorted(synced.uploaded) == sorted(names)
    on_volume = sorted(p.name for p in (root / synced.data_dir).iterdir())
    assert on_volume == sorted(names)
    # The brain's glob hands the recipes the user's stems: outputs/…/東京.md, not -.md.
    stems = {i["stem"] for i in glob_items(root, f"{synced.data_dir}/*", 10)}
    assert stems == {"東京", "大阪", "Café résumé – ünïcode talk", "Ελλάδα"}


def test_names_equal_after_nfc_are_one_collision_naming_both(tmp_path):
    folder = tmp_path / "talks"
    folder.mkdir()
    composed = unicodedata.normalize("NFC", "café.mp4")
    decomposed = unicodedata.normalize("NFD", "café.mp4")
    assert composed != decomposed
    (folder / composed).write_bytes(b"1")
    (folder / decomposed).write_bytes(b"2")
    (folder / "other.mp4").write_bytes(b"3")
    root = tmp_path / "volume"
    with pytest.raises(AirigError) as refused:
        inputs_sync.sync(folder, settings=None, service=FakeService(root))  # type: ignore[arg-type]
    assert "same name" in refused.value.message and "other.mp4" not in refused.value.message
    assert refused.value.message.count("caf") == 2 and not root.exists()
    assert volume_name(decomposed) == composed


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a\x00b.txt", "a-b.txt"),
        ("../../etc/passwd", "etc-passwd"),
        ("..", "file"),
        ("-rf.mp4", "rf.mp4"),
        (".hidden.mp4", "hidden.mp4"),
        ("line\nbreak\t.mp4", "line-break-.mp4"),
        ("win\\dows.mp4", "win-dows.mp4"),
        ("invoice\u202egpj.exe", "invoice-gpj.exe"),  # RTL override: reads as 'exe.jpg'
        ("a\u2066b\u2069.jpg", "a-b-.jpg"),
        ("\x1b[31mred.jpg", "[31mred.jpg"),
    ],
)
def test_what_is_unsafe_on_the_volume_is_not_kept(name, expected):
    safe = volume_name(name)
    assert safe == expected
    assert "/" not in safe and "\x00" not in safe and safe not in ("", ".", "..")
    assert not safe.startswith(("-", "."))
    assert all(unicodedata.category(c) != "Cc" for c in safe)
    relative_data_path(f"inputs/x/{safe}")


@pytest.mark.parametrize("unit", ["a", "é", "東", "🎉"])
def test_a_long_name_is_cut_at_a_character_boundary_keeping_its_suffix(unit):
    name = unit * (300 // len(unit.encode()) + 1) + ".mp4"
    assert len(name.encode()) > 300
    safe = volume_name(name)
    assert safe.endswith(".mp4") and len(safe.encode()) <= NAME_BYTES
    assert safe[: -len(".mp4")] == unit * len(safe[: -len(".mp4")])  # no half a character
    # what the recipes make of it still fits the file system: <stem>-pages, .<stem>.md.partial
    stem = Path(safe).stem
    assert len(f".{stem}.md.partial".encode()) <= 255 and len(f"{stem}-pages".encode()) <= 255


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("東京の写真", "inputs/東京の写真"), ("My Talks", "inputs/My-Talks"),
     ('a"b\'c*[d]', "inputs/a-b-c-d"), ("-.", "inputs/inputs"), ("é" * 200, "inputs/" + "é" * 50)],
)  # fmt: skip
def test_a_folder_keeps_its_letters_and_stays_safe_in_a_plan_and_a_glob(tmp_path, raw, expected):
    assert data_folder_for(tmp_path / raw) == expected


def test_an_executors_default_folder_keeps_the_letters():
    assert safe_stem("inputs/x/東京.mp4") == "東京"
    assert safe_stem("inputs/x/Café résumé.mp4") == "Café_résumé"
    assert len(safe_stem("inputs/x/" + "東" * 200 + ".mp4").encode()) <= 100
    assert safe_stem("inputs/x/東京.mp4") != safe_stem("inputs/x/大阪.mp4")
