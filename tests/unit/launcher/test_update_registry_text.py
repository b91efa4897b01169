"""What a registry or ``.airig/images.lock`` says is not trusted (issue 36 §4): `update
--check` printed a registry's build date and digest as rich markup (``[/]`` crashed it),
took any header as a digest, and the lock's digests went into host.env unchecked. A digest
is ``sha256:`` + 64 lowercase hex or refused in one line naming where it came from; the
rest of a registry's words are escaped, stripped of control characters, or dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airig.common.errors import ConfigError, DockerError
from airig.launcher.images.choose import ImageChoice, ImageSelection
from airig.launcher.images.lock import Locked, lock_path, read_lock, shown, write_lock
from airig.launcher.images.remote import ARCH, Registry
from tests.support import one_error, run_cli

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
CFG = "sha256:" + "c" * 64
MIRROR = "127.0.0.1:5000"
TAG = f"{MIRROR}/speaches-ai/speaches:0.8.3-cpu"
MEGABYTE = "x" * (1 << 20)
# what a hostile or broken registry (or a hand-edited lock) may say
HOSTILE = {
    "markup close": "[/]",
    "markup open": "[bold red]boom",
    "ansi": "\x1b[31msha256:" + "1" * 64 + "\x1b[0m",
    "nul": "sha256:" + "1" * 63 + "\x00",
    "megabyte": "sha256:" + MEGABYTE,
    "upper hex": "sha256:" + "A" * 64,
    "short": "sha256:" + "1" * 63,
    "newline": D1 + "\nOLLAMA_IMAGE=evil",
    "other algorithm": "sha512:" + "1" * 128,
}


class Answer:
    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        self.status_code, self._body, self.headers = status, body, headers or {}
        self.content = b"" if isinstance(body, Exception) else json.dumps(body).encode()

    def json(self) -> Any:
        if isinstance(self._body, Exception):
            raise self._body
        return self._body


def registry(digest: str = D2, created: Any = "2026-11-20T03:00:00Z") -> Registry:
    """A registry whose tag names ``digest`` (its header) built at ``created``."""

    def get(url: str, **_kw: Any) -> Answer:
        if "/manifests/" in url:
            return Answer(200, {"config": {"digest": CFG}}, {"Docker-Content-Digest": digest})
        assert url.endswith(f"/blobs/{CFG}")
        return Answer(200, {"created": created})

    return Registry(get)


@pytest.fixture
def running(launcher_kit: Path) -> Path:
    """A kit `up` started on the cpu profile, Whisper locked at D1."""
    state = launcher_kit / ".airig"
    state.mkdir()
    (state / "host.env").write_text(f"AIRIG_UP_PROFILE=cpu\nWHISPER_IMAGE_CPU={TAG}\n")
    (launcher_kit / ".env").write_text("")
    write_lock(state, {"WHISPER_IMAGE_CPU": Locked("whisper", "WHISPER_IMAGE_CPU", TAG, D1, "cpu")})
    return launcher_kit


def check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reg: Registry
) -> tuple[int, str, str]:
    """`update --check` through the CLI, the registry answering through ``reg``."""
    import airig.launcher.cli.update as cli_update
    import airig.launcher.hardware.choice as choice
    from airig.launcher.lifecycle.update import lookup_cached

    whisper = ImageChoice("whisper", "WHISPER_IMAGE_CPU", TAG, False, "cpu profile")
    chosen = ImageSelection("cpu", (whisper,), {})
    monkeypatch.setattr(
        choice, "choose_profile", lambda *_a, **_k: type("P", (), {"images": chosen})
    )
    monkeypatch.setattr(cli_update, "Docker", lambda: None)
    monkeypatch.setattr(cli_update, "lookup_cached", lambda: lookup_cached(reg))
    return run_cli(monkeypatch, capsys, None, "update", "--check")


def test_a_sound_registry_answer_is_shown(
    running: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = check(monkeypatch, capsys, registry())
    assert code == 0, err
    assert f"moved upstream: {'1' * 12} → {'2' * 12} (built 2026-11-20)" in out


@pytest.mark.parametrize("digest", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_digest_header_that_is_not_a_digest_is_refused_in_one_line(
    running: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    digest: str,
) -> None:
    code, out, err = check(monkeypatch, capsys, registry(digest=digest))
    line = one_error(code, err, TAG, MIRROR, "Docker-Content-Digest", "sha256: and 64")
    assert "nothing was changed" in err
    assert digest not in out + err and "\x1b" not in out + err and "\x00" not in out + err
    assert len(line) < 300 and len(out + err) < 2000
    assert read_lock(running / ".airig")["WHISPER_IMAGE_CPU"].digest == D1  # untouched


@pytest.mark.parametrize(
    "created",
    ["[/]", "[bold red]2026", "\x1b[31m2026-11-20T03:00:00Z", "2026-11-20\x00", MEGABYTE,
     "2026-11-20T03:00:00Z[/]", 20261120, None, ["2026"]],
    ids=["close", "open", "ansi", "nul", "megabyte", "trailing markup", "int", "null", "list"],
)  # fmt: skip
def test_a_build_date_that_is_not_a_timestamp_is_not_shown(
    running: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    created: Any,
) -> None:
    code, out, err = check(monkeypatch, capsys, registry(created=created))
    assert code == 0, err
    assert "Traceback" not in err
    assert f"{'1' * 12} → {'2' * 12} (build date unknown)" in out
    assert "\x1b" not in out and "\x00" not in out and len(out) < 2000


def test_the_registrys_nested_digests_never_reach_a_url() -> None:
    """An index's or manifest's digest goes into the next URL: one that is not a digest
    (``../../``) is not followed; the build date is unknown, the tag's digest stands."""
    asked: list[str] = []

    def get(url: str, **_kw: Any) -> Answer:
        asked.append(url)
        if url.endswith("/manifests/1"):
            this = {"os": "linux", "architecture": ARCH}
            index = {"manifests": [{"digest": "../../../v2/other/blobs/x", "platform": this}]}
            return Answer(200, index, {"Docker-Content-Digest": D1})
        return Answer(200, {"config": {"digest": "../x"}, "created": "2026-11-20T03:00:00Z"})

    assert Registry(get).lookup(f"{MIRROR}/a/b:1") == (D1, "")
    assert asked == [f"http://{MIRROR}/v2/a/b/manifests/1"]

    def config_escapes(url: str, **_kw: Any) -> Answer:
        asked.append(url)
        return Answer(200, {"config": {"digest": "[/]"}}, {"Docker-Content-Digest": D1})

    asked.clear()
    assert Registry(config_escapes).lookup(f"{MIRROR}/a/b:1") == (D1, "")
    assert len(asked) == 1


@pytest.mark.parametrize(
    "body",
    [["a list"], "a string", {"token": ["T"]}, {"token": "T\r\nX-Evil: 1"}, {"token": 7},
     {"token": "x" * (1 << 20)}, ValueError("not JSON")],
    ids=["list", "string", "token list", "header injection", "int", "megabyte", "not json"],
)  # fmt: skip
def test_a_hostile_token_answer_is_one_line_not_a_traceback(body: Any) -> None:
    """The realm's answer is the registry's too: anything but a token string of visible
    ASCII is no token, and the registry's 401 is what the user reads."""
    sent: list[dict[str, str]] = []

    def get(url: str, headers: dict[str, str] | None = None, **_kw: Any) -> Answer:
        if url.startswith("https://auth"):
            return Answer(200, body)
        sent.append(dict(headers or {}))
        challenge = 'Bearer realm="https://auth/token",service="hub"'
        return Answer(401, {}, {"WWW-Authenticate": challenge})

    with pytest.raises(DockerError) as caught:
        Registry(get).lookup("ollama/ollama:1")
    assert caught.value.message.endswith("answered HTTP 401")
    assert all("\n" not in h.get("Authorization", "") for h in sent)
    assert all(len(h.get("Authorization", "")) < 100 for h in sent)


def test_a_megabyte_challenge_is_no_token_and_no_hang() -> None:
    """`(\\w+)="` over a megabyte of word characters backtracks for minutes: a challenge
    no registry sends is not parsed (and its realm never asked)."""
    asked: list[str] = []

    def get(url: str, **_kw: Any) -> Answer:
        asked.append(url)
        challenge = 'Bearer realm="https://auth/token",service="hub",' + MEGABYTE
        return Answer(401, {}, {"WWW-Authenticate": challenge + '[/]="x"'})

    with pytest.raises(DockerError) as caught:
        Registry(get).lookup("ollama/ollama:1")
    assert caught.value.message.endswith("answered HTTP 401")
    assert not any(url.startswith("https://auth") for url in asked)


# ------------------------------------------------------------------ the lock file
def hand_edited(state: Path, **fields: Any) -> Path:
    entry = {"service": "whisper", "variable": "WHISPER_IMAGE_CPU", "tag": TAG, "digest": D1,
             "why": "cpu", "created": "", "locked_at": ""}  # fmt: skip
    entry.update(fields)
    path = lock_path(state)
    path.write_text(json.dumps({"version": 1, "images": {"WHISPER_IMAGE_CPU": entry}}))
    return path


@pytest.mark.parametrize("digest", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_lock_digest_that_is_not_a_digest_is_refused_naming_the_entry(
    tmp_path: Path, digest: str
) -> None:
    path = hand_edited(tmp_path, digest=digest)
    with pytest.raises(ConfigError) as caught:
        read_lock(tmp_path)
    message, hint = caught.value.message, caught.value.hint or ""
    assert str(path) in message and "WHISPER_IMAGE_CPU" in message
    assert "digest that is not sha256: and 64 lowercase hex digits" in message
    assert digest not in message and len(message) < 300
    assert "delete the WHISPER_IMAGE_CPU entry" in hint and "update --check" in hint


@pytest.mark.parametrize(
    "fields",
    [{"tag": TAG + "\nOLLAMA_IMAGE=evil"}, {"tag": "a b"}, {"tag": ""}, {"variable": "X\x1b[2J"},
     {"tag": 5}, {"why": None}, {"digest": ["sha256:" + "1" * 64]}],
    ids=["tag newline", "tag space", "tag empty", "variable ansi", "tag int", "why null",
         "digest list"],
)  # fmt: skip
def test_a_lock_entry_of_the_wrong_shape_is_refused(tmp_path: Path, fields: dict[str, Any]) -> None:
    hand_edited(tmp_path, **fields)
    with pytest.raises(ConfigError) as caught:
        read_lock(tmp_path)
    assert "the entry WHISPER_IMAGE_CPU has a" in caught.value.message
    assert "\x1b" not in caught.value.message and "\n" not in caught.value.message


def test_a_built_image_without_a_digest_stays_lockable(tmp_path: Path) -> None:
    hand_edited(tmp_path, digest="")
    assert read_lock(tmp_path)["WHISPER_IMAGE_CPU"].digest == ""


def test_a_hostile_entry_name_is_shown_clipped_and_without_control_characters(
    tmp_path: Path,
) -> None:
    name = "\x1b[31m[/]" + "N" * 5000
    entry = {"service": "s", "variable": "V", "tag": "t", "digest": "[/]", "why": "w"}
    lock_path(tmp_path).write_text(json.dumps({"version": 1, "images": {name: entry}}))
    with pytest.raises(ConfigError) as caught:
        read_lock(tmp_path)
    assert "\x1b" not in caught.value.message and len(caught.value.message) < 400
    assert shown("a\x00b\x9bc", 80) == "a?b?c" and len(shown("x" * 500, 80)) == 80


def test_update_check_on_a_hand_edited_lock_is_one_line(
    running: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hand_edited(running / ".airig", digest="[/]")
    code, _out, err = check(monkeypatch, capsys, registry())
    one_error(code, err, "images.lock", "WHISPER_IMAGE_CPU", "sha256: and 64")
