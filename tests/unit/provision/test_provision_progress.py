"""Rendering the init containers' events: bars while pulling, then one table."""

from __future__ import annotations

import io
import json

from rich.console import Console

from airig.provision.events import Emitter
from airig.provision.progress import parse_event, render


def console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=160, force_terminal=False, color_system=None), out


def event(**fields: object) -> str:
    return json.dumps(fields)


def test_compose_prefix_and_noise_are_handled() -> None:
    line = 'ollama-init-1  | {"event": "verified", "service": "ollama", "model": "m"}'
    assert parse_event(line) == {"event": "verified", "service": "ollama", "model": "m"}
    assert parse_event(b'{"event": "failed"}\n') == {"event": "failed"}
    assert parse_event("ollama-init-1  | pulling manifest") is None
    assert parse_event("{broken") is None
    assert parse_event('{"no": "event"}') is None


def test_progress_then_table_of_verified_and_failed() -> None:
    lines = [
        "whatever compose says first",
        event(event="progress", service="ollama", model="qwen", completed=10, total=100),
        event(event="progress", service="ollama", model="qwen", completed=100, total=100),
        event(
            event="verified",
            service="ollama",
            model="qwen",
            size=4_700_000_000,
            files=5,
            cached=False,
        ),  # fmt: skip
        event(
            event="verified", service="whisper", model="sys/small", size=1000, files=4, cached=True
        ),  # fmt: skip
        event(event="failed", service="ollama", model="nope", error="ollama model 'nope': [x]"),
    ]
    term, out = console()
    summary = render(lines, term)
    text = out.getvalue()
    assert not summary.ok
    assert [row.model for row in summary.failed] == ["nope"]
    assert "4.7 GB" in text and "(cached)" in text and "ollama model 'nope': [x]" in text


def test_listing_table() -> None:
    lines = [
        event(
            event="listed",
            service="ollama",
            model="a:latest",
            size=5,
            configured=True,
            present=False,
        ),  # fmt: skip
        event(
            event="listed", service="ollama", model="b:1b", size=7, configured=False, present=True
        ),  # fmt: skip
    ]
    term, out = console()
    summary = render(lines, term)
    assert summary.ok
    assert "yes, not pulled" in out.getvalue() and "no, on disk" in out.getvalue()


def test_emitter_output_round_trips_and_throttles() -> None:
    clock = iter([0.0, 0.1, 0.2, 0.9]).__next__
    stream = io.StringIO()
    emitter = Emitter("ollama", stream, clock=clock)
    for done in (1, 2, 3, 4):
        emitter.progress("m", done, 10)
    emitter.failed("m", "boom")
    events = [parse_event(line) for line in stream.getvalue().splitlines()]
    assert [e["completed"] for e in events if e["event"] == "progress"] == [1, 4]
    assert events[-1] == {"event": "failed", "service": "ollama", "model": "m", "error": "boom"}
