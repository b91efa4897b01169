"""``.airig/images.lock`` (images/lock.py): the file, what `up` holds, the diff `update
--check` shows, the update log, and the registry reference parsing (images/remote.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from airig.common.errors import ConfigError, DockerError
from airig.launcher.images.choose import ImageChoice, ImageSelection
from airig.launcher.images.lock import (
    Locked,
    Move,
    append_log,
    diff,
    hold,
    log_entry,
    read_lock,
    read_log,
    repository,
    write_lock,
)
from airig.launcher.images.remote import ARCH, Registry, parse, scheme_of
from airig.launcher.lifecycle.update import age, short

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
AMD, CFG = "sha256:" + "a" * 64, "sha256:" + "c" * 64
MIRROR = "127.0.0.1:5000"


def entry(
    variable: str = "OLLAMA_IMAGE", tag: str = "ollama/ollama:0.20.6", digest: str = D1
) -> Locked:
    return Locked("ollama", variable, tag, digest, "cpu profile", "2026-11-01T00:00:00Z", "t")


def selection(
    image: str = "ollama/ollama:0.20.6", variable: str = "OLLAMA_IMAGE"
) -> ImageSelection:
    choice = ImageChoice("ollama", variable, image, False, "cpu profile; image from images.yaml")
    return ImageSelection("cpu", (choice,), {variable: image, "COMFYUI_IMAGE_CPU": "c:cpu"})


# ------------------------------------------------------------------ the file
def test_the_lock_round_trips_and_is_written_whole(tmp_path: Path) -> None:
    lock = {"OLLAMA_IMAGE": entry(), "WHISPER_IMAGE_CPU": entry("WHISPER_IMAGE_CPU", "w:cpu", "")}
    write_lock(tmp_path, lock)
    assert read_lock(tmp_path) == lock
    data = json.loads((tmp_path / "images.lock").read_text())
    assert data["version"] == 1 and data["images"]["OLLAMA_IMAGE"]["digest"] == D1
    assert [p.name for p in tmp_path.iterdir()] == ["images.lock"]  # no temporary file left


def test_no_lock_is_empty_and_a_broken_one_is_one_error(tmp_path: Path) -> None:
    assert read_lock(tmp_path) == {}
    (tmp_path / "images.lock").write_text('{"images": {"X": {"nope": 1}}}')
    with pytest.raises(ConfigError, match="cannot read .*images.lock") as caught:
        read_lock(tmp_path)
    assert "move" in (caught.value.hint or "")


@pytest.mark.parametrize(
    ("ref", "repo"),
    [
        ("ollama/ollama:0.20.6", "ollama/ollama"),
        (f"{MIRROR}/ollama/ollama:0.20.6", f"{MIRROR}/ollama/ollama"),
        (f"{MIRROR}/ollama/ollama", f"{MIRROR}/ollama/ollama"),
        (f"{MIRROR}/ollama/ollama@{D1}", f"{MIRROR}/ollama/ollama"),
        ("ubuntu:24.04", "ubuntu"),
    ],
)
def test_the_repository_keeps_a_registry_port(ref: str, repo: str) -> None:
    assert repository(ref) == repo


# ------------------------------------------------------------------ what up holds
def test_up_starts_the_locked_digest_of_the_chosen_tag() -> None:
    held, notes = hold(selection(), {"OLLAMA_IMAGE": entry()}, {})
    assert held.of("ollama").image == f"ollama/ollama@{D1}"
    assert held.env["OLLAMA_IMAGE"] == f"ollama/ollama@{D1}"
    assert held.env["COMFYUI_IMAGE_CPU"] == "c:cpu"  # not locked: as chosen
    assert [n.note for n in notes] == [""]


def test_a_tag_the_engine_holds_at_the_locked_digest_stays_a_tag() -> None:
    """Compose hashes the image: string into the service: the tag the engine already has
    at the locked digest keeps a second `up` from recreating the containers; the engine's
    tag at another digest (pulled by hand, moved upstream) is not started."""
    at = {"ollama/ollama:0.20.6": {D1}}
    held, _ = hold(selection(), {"OLLAMA_IMAGE": entry()}, {}, lambda ref: at.get(ref, set()))
    assert held.of("ollama").image == "ollama/ollama:0.20.6"
    at = {"ollama/ollama:0.20.6": {D2}}
    held, _ = hold(selection(), {"OLLAMA_IMAGE": entry()}, {}, lambda ref: at.get(ref, set()))
    assert held.of("ollama").image == f"ollama/ollama@{D1}"


def test_a_new_mirror_of_the_same_upstream_name_keeps_the_digest() -> None:
    held, _ = hold(selection(f"{MIRROR}/ollama/ollama:0.20.6"), {"OLLAMA_IMAGE": entry()}, {})
    assert held.of("ollama").image == f"{MIRROR}/ollama/ollama@{D1}"


def test_a_moved_choice_keeps_the_locked_image_and_says_update_moves_it() -> None:
    """A driver upgrade: images.yaml now picks another tag; `up` keeps what ran."""
    held, notes = hold(selection("ollama/ollama:0.30.0"), {"OLLAMA_IMAGE": entry()}, {})
    assert held.of("ollama").image == f"ollama/ollama@{D1}"
    assert "ollama/ollama:0.30.0 is chosen now" in notes[0].note
    assert "update ollama" in notes[0].note


def test_a_new_pin_wins_over_the_lock() -> None:
    pins = {"OLLAMA_IMAGE": "ollama/ollama:0.30.0"}
    held, notes = hold(selection("ollama/ollama:0.30.0"), {"OLLAMA_IMAGE": entry()}, pins)
    assert held.of("ollama").image == "ollama/ollama:0.30.0" and notes == []


@pytest.mark.parametrize(
    ("image", "lock"),
    [
        ("ollama/ollama:0.20.6", {}),  # nothing locked yet
        ("ollama/ollama:0.20.6", {"OLLAMA_IMAGE": entry(digest="")}),  # built locally
        (f"ollama/ollama@{D2}", {"OLLAMA_IMAGE": entry()}),  # the user pinned a digest
    ],
)
def test_the_chosen_image_runs_as_it_is(image: str, lock: dict[str, Locked]) -> None:
    held, notes = hold(selection(image), lock, {})
    assert held.of("ollama").image == image and notes == []


# ------------------------------------------------------------------ the diff
def test_the_diff_tells_current_moved_and_a_new_choice_apart() -> None:
    lock = {
        "OLLAMA_IMAGE": entry(),
        "WHISPER_IMAGE_CPU": entry("WHISPER_IMAGE_CPU", "w:cpu", D1),
        "COMFYUI_IMAGE_CPU": entry("COMFYUI_IMAGE_CPU", "c:cu126", D1),
    }
    wanted = {
        "OLLAMA_IMAGE": ImageChoice("ollama", "OLLAMA_IMAGE", "ollama/ollama:0.20.6", False, "a"),
        "COMFYUI_IMAGE_CPU": ImageChoice(
            "comfyui", "COMFYUI_IMAGE_CPU", "c:cu130", True, "driver 580"
        ),
    }  # WHISPER_IMAGE_CPU chosen by nothing now: its locked tag is asked
    remote = {"ollama/ollama:0.20.6": (D1, ""), "w:cpu": (D2, "2026-11-20"), "c:cu130": (D2, "x")}
    asked: list[str] = []

    def lookup(tag: str) -> tuple[str, str]:
        asked.append(tag)
        return remote[tag]

    moves = {m.variable: m for m in diff(lock, wanted, lookup)}
    assert sorted(asked) == sorted(remote)
    assert moves["OLLAMA_IMAGE"].kind == "current"
    assert (moves["WHISPER_IMAGE_CPU"].kind, moves["WHISPER_IMAGE_CPU"].created) == (
        "moved",
        "2026-11-20",
    )
    comfy = moves["COMFYUI_IMAGE_CPU"]
    assert (comfy.kind, comfy.tag, comfy.why, comfy.reference) == (
        "choice",
        "c:cu130",
        "driver 580",
        f"c@{D2}",
    )


def test_a_lookup_failure_stops_the_diff() -> None:
    def lookup(tag: str) -> tuple[str, str]:
        raise DockerError(f"cannot check {tag}: gone", "fix")

    with pytest.raises(DockerError, match="cannot check ollama"):
        diff({"OLLAMA_IMAGE": entry()}, {}, lookup)


# ------------------------------------------------------------------ the log
def test_each_update_and_rollback_is_one_json_line(tmp_path: Path) -> None:
    move = Move("ollama", "OLLAMA_IMAGE", entry(), "ollama/ollama:0.20.6", D2, "", "a")
    path = tmp_path / "update.log"
    append_log(path, log_entry("update", move, False, "ollama-cpu unhealthy", "T1"))
    append_log(path, log_entry("rollback", move, True, "", "T2"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = read_log(path)[0]
    assert first == {
        "time": "T1", "action": "update", "service": "ollama", "variable": "OLLAMA_IMAGE",
        "from": {"tag": "ollama/ollama:0.20.6", "digest": D1},
        "to": {"tag": "ollama/ollama:0.20.6", "digest": D2},
        "ok": False, "reason": "ollama-cpu unhealthy",
    }  # fmt: skip
    path.write_text("not json\n")
    with pytest.raises(ConfigError, match="cannot read"):
        read_log(path)


def test_status_words() -> None:
    when = datetime(2026, 11, 25, tzinfo=UTC)
    assert age("2026-11-20T00:00:00.123456789Z", when) == "5 days"
    assert age("2026-11-24T21:00:00+00:00", when) == "3 h"
    assert age("", when) == "?"
    assert short(D1) == "1" * 12 and short("") == "(no digest)"


# ------------------------------------------------------------------ the registry
@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("ollama/ollama:0.20.6", ("registry-1.docker.io", "ollama/ollama", "0.20.6")),
        ("ubuntu", ("registry-1.docker.io", "library/ubuntu", "latest")),
        (f"{MIRROR}/speaches-ai/speaches:0.8.3-cpu", (MIRROR, "speaches-ai/speaches", "0.8.3-cpu")),
        (f"ghcr.io/a/b@{D1}", ("ghcr.io", "a/b", D1)),
    ],
)
def test_a_reference_splits_into_host_repository_and_tag(ref: str, parts: tuple[str, ...]) -> None:
    assert parse(ref) == parts


def test_only_loopback_registries_are_asked_over_plain_http() -> None:
    assert [scheme_of(h) for h in (MIRROR, "localhost:5000", "[::1]:5000")] == ["http"] * 3
    assert [scheme_of(h) for h in ("ghcr.io", "registry-1.docker.io", "10.0.0.2:5000")] == [
        "https"
    ] * 3


class Answer:
    def __init__(
        self, status: int, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        self.status_code, self._body, self.headers = status, body, headers or {}
        self.content = json.dumps(body).encode()

    def json(self) -> Any:
        return self._body


def test_a_token_registry_is_asked_with_an_anonymous_token_and_the_build_date_read() -> None:
    """Docker Hub's way: 401 with a Bearer challenge, a token from its realm, then the
    index → the amd64 manifest → its config's ``created``."""
    calls: list[tuple[str, dict[str, str]]] = []

    def get(url: str, headers: dict[str, str] | None = None, **kw: Any) -> Answer:
        calls.append((url, dict(headers or {})))
        if url.startswith("https://auth"):
            assert kw["params"] == {"service": "hub", "scope": "repository:ollama/ollama:pull"}
            return Answer(200, {"token": "T"})
        if (headers or {}).get("Authorization") != "Bearer T":
            challenge = 'Bearer realm="https://auth/token",service="hub",scope="repository:ollama/ollama:pull"'
            return Answer(401, {}, {"WWW-Authenticate": challenge})
        if url.endswith("/manifests/0.20.6"):
            other = {"os": "linux", "architecture": "s390x"}
            this = {"os": "linux", "architecture": ARCH}  # this machine's
            index = {"manifests": [{"digest": D2, "platform": other},
                                   {"digest": AMD, "platform": this}]}  # fmt: skip
            return Answer(200, index, {"Docker-Content-Digest": D1})
        if url.endswith(f"/manifests/{AMD}"):
            return Answer(200, {"config": {"digest": CFG}})
        assert url.endswith(f"/blobs/{CFG}")
        return Answer(200, {"created": "2026-11-20T03:00:00Z"})

    assert Registry(get).lookup("ollama/ollama:0.20.6") == (D1, "2026-11-20T03:00:00Z")
    assert calls[0][0] == "https://registry-1.docker.io/v2/ollama/ollama/manifests/0.20.6"
    assert "application/vnd.oci.image.index.v1+json" in calls[0][1]["Accept"]


def test_a_missing_tag_and_a_registry_down_are_one_line_each() -> None:
    def missing(url: str, **kw: Any) -> Answer:
        return Answer(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})

    with pytest.raises(DockerError) as caught:
        Registry(missing).lookup(f"{MIRROR}/a/b:gone")
    assert (
        caught.value.message
        == f"cannot check {MIRROR}/a/b:gone: no such tag in {MIRROR} (manifest unknown)"
    )

    def refused(url: str, **kw: Any) -> Answer:
        raise requests.ConnectionError("[Errno 111] Connection refused")

    with pytest.raises(DockerError) as caught:
        Registry(refused).lookup(f"{MIRROR}/a/b:1")
    assert caught.value.message.endswith(
        f"the registry {MIRROR} is unreachable (connection refused)"
    )
    assert "nothing was changed" in (caught.value.hint or "")
