"""ComfyUI downloads: comfy-cli's argument order, orphan adoption, Range resume rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from airig.common.errors import ProvisionError
from airig.provision import download
from airig.provision.download import adopt_orphans, comfy_command, partial_path, range_download

DATA = bytes(range(256)) * 40  # 10240 bytes


def test_comfy_cli_global_flags_come_before_the_subcommand() -> None:
    command = comfy_command(Path("/comfy/ComfyUI"), "http://h/x", "loras", "x.airig-partial")
    assert command[:4] == ["comfy", "--skip-prompt", "--workspace=/comfy/ComfyUI", "model"]
    assert command[4:] == [
        "download",
        "--url",
        "http://h/x",
        "--relative-path",
        "models/loras",
        "--filename",
        "x.airig-partial",
    ]


def test_largest_orphan_of_a_killed_comfy_cli_becomes_the_partial(tmp_path: Path) -> None:
    partial = partial_path(tmp_path / "m.safetensors")
    (tmp_path / f"{partial.name}.abcdefgh.part").write_bytes(b"x" * 10)
    (tmp_path / f"{partial.name}.zyxwvuts.part").write_bytes(b"x" * 30)
    partial.write_bytes(b"x" * 20)
    (tmp_path / "other.safetensors.abcdefgh.part").write_bytes(b"keep")
    adopt_orphans(partial)
    assert partial.stat().st_size == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "m.safetensors.airig-partial",
        "other.safetensors.abcdefgh.part",
    ]


class FakeResponse:
    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None):
        self.status_code, self.body, self.headers = status, body, headers or {}
        self.url = "http://h/x"

    def iter_content(self, size: int):
        for start in range(0, len(self.body), size):
            yield self.body[start : start + size]

    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *_: object) -> None:
        return None


class FakeSession:
    """Serves DATA honouring Range unless told to ignore it; records request headers."""

    def __init__(self, honour_range: bool = True, status: int | None = None) -> None:
        self.honour_range, self.status, self.requests = honour_range, status, []

    def get(self, url: str, headers: dict[str, str], **_: object) -> FakeResponse:
        self.requests.append(headers)
        if self.status:
            return FakeResponse(self.status, b"")
        if "Range" in headers and self.honour_range:
            start = int(headers["Range"][6:-1])
            content_range = f"bytes {start}-{len(DATA) - 1}/{len(DATA)}"
            return FakeResponse(206, DATA[start:], {"Content-Range": content_range})
        return FakeResponse(200, DATA)


def fetch_into(partial: Path, session: FakeSession) -> list[int]:
    seen: list[int] = []
    range_download("http://h/x", partial, len(DATA), seen.append, session)  # type: ignore[arg-type]
    return seen


def test_partial_resumes_from_its_size(tmp_path: Path) -> None:
    partial = tmp_path / "m.airig-partial"
    partial.write_bytes(DATA[:4000])
    session = FakeSession()
    progress = fetch_into(partial, session)
    assert partial.read_bytes() == DATA
    assert session.requests == [{"Range": "bytes=4000-"}]
    assert progress[-1] == len(DATA)


def test_server_ignoring_range_restarts_cleanly(tmp_path: Path) -> None:
    partial = tmp_path / "m.airig-partial"
    partial.write_bytes(b"junk" * 100)
    fetch_into(partial, FakeSession(honour_range=False))
    assert partial.read_bytes() == DATA


def test_partial_larger_than_the_file_is_discarded(tmp_path: Path) -> None:
    partial = tmp_path / "m.airig-partial"
    partial.write_bytes(b"x" * (len(DATA) + 1))
    session = FakeSession()
    fetch_into(partial, session)
    assert partial.read_bytes() == DATA and session.requests == [{}]


def test_http_error_fails_with_the_status(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="HTTP 404"):
        fetch_into(tmp_path / "m.airig-partial", FakeSession(status=404))


def test_comfy_cli_failure_falls_back_to_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple] = []
    monkeypatch.setattr(download, "run_comfy_cli", lambda *args: calls.append(args) or "boom")
    monkeypatch.setattr(requests, "Session", lambda: FakeSession())
    partial = partial_path(tmp_path / "models" / "loras" / "m.safetensors")
    download.fetch(tmp_path, "http://h/x", "loras", partial, len(DATA), lambda _: None)
    assert calls == [(tmp_path, "http://h/x", "loras", "m.safetensors.airig-partial")]
    assert partial.read_bytes() == DATA
