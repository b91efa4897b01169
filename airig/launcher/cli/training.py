"""`training export --out FILE`: the kit's llm answers as a file a person fine-tunes with.

The brain serves the samples a page at a time (``GET /v1/training/samples``, admin token)
with its exclusions applied: failed attempts, ``sensitive`` tasks, input or answers from
untrusted rigs, tasks the store no longer holds, samples whose log lacks what the model
saw, those under ``--min-quality``, unreadable lines; every text redacted again
(``airig/brain/store/training.py`` says why each). Here the pages become one JSONL file,
each line ``{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}``:
the chat format of OpenAI's fine-tuning
(https://platform.openai.com/docs/guides/supervised-fine-tuning, "Preparing your data")
and the "conversational" format TRL's SFTTrainer reads as it is
(https://huggingface.co/docs/trl/dataset_formats, "messages"); the same messages twice
are written once.

Nothing is half-written: the file is written beside ``--out`` under a temporary name
(mode 600: the kit's prompts and answers), synced and renamed only when whole; a failure
at any point removes it. The samples are streamed: a page is held at a time, and of
what was written only a digest per line (to drop duplicates).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from airig.common import durations
from airig.common.errors import AirigError, ConfigError
from airig.common.task_types import TASK_TYPES
from airig.launcher.brain_client import BrainClient
from airig.launcher.console import console
from airig.launcher.settings import Settings

# The types whose attempts the brain logs (brain_hooks "training_sample"); the brain's
# route takes these alone.
TYPES = tuple(name for name, spec in TASK_TYPES.items() if "training_sample" in spec.brain_hooks)
QUALITIES = ("any", "first-try")  # lowest first (store/training.py)
DUPLICATE = "duplicate"
# What each reason means, in the summary (the brain's words: store/training.py REASONS).
REASONS = {
    "unreadable": "log lines that are not a sample (torn, not JSON, NUL, over 4 MB)",
    "failed": "failed attempts",
    "before_since": "older than --since",
    "sensitive": "sensitive tasks",
    "task_gone": "tasks the store no longer holds (trust unknown)",
    "other_type": "tasks of another --type",
    "untrusted_input": "input from an untrusted rig or declared untrusted",
    "untrusted_rig": "answered by an untrusted rig",
    "incomplete": "the log lacks what the model saw (images, untrusted_input, no answer)",
    "below_quality": "below --min-quality",
    DUPLICATE: "the same messages as an earlier line",
}
# Pages that moved no line before the export gives up (a log rotating under each read).
STALLED_PAGES = 5


def build_training_app(settings_of: Callable[[], Settings]) -> typer.Typer:
    app = typer.Typer(help="What the kit's history can teach a model: the training export.")

    @app.command("export")
    def export(
        out: Annotated[
            Path,
            typer.Option("--out", help="The JSONL file to write (chat format).", parser=_out_path),
        ],
        since: Annotated[
            str | None,
            typer.Option(
                "--since",
                help="Only samples since: an age (7d, 12h) or a date "
                "(2026-11-01, 2026-11-01T08:00; UTC unless it says).",
            ),
        ] = None,
        task_type: Annotated[
            str, typer.Option("--type", help=f"The task type ({', '.join(TYPES)}).")
        ] = "llm",
        min_quality: Annotated[
            str,
            typer.Option(
                "--min-quality",
                help="any, or first-try: succeeded with no failed "
                "attempt before (no retry, review or escalation).",
            ),
        ] = "any",
        force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists.")] = (
            False
        ),
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = (
            False
        ),
    ) -> None:
        """Write the succeeded llm samples as chat JSONL, without sensitive tasks, untrusted
        rigs' input, secrets or duplicates; then what was left out and why."""
        since_ts = parse_since(since, time.time())
        check_choices(task_type, min_quality)
        target = check_out(out, force)
        settings = settings_of()
        if settings.joined:
            raise ConfigError(
                f"this rig joined the brain at {settings.join_brain_url}: the samples are there",
                "run `training export` on the brain's machine",
            )
        client = BrainClient.from_settings(settings)
        params: dict[str, Any] = {"type": task_type, "min_quality": min_quality}
        if since_ts is not None:
            params["since"] = since_ts
        summary = write_export(target, pages(client.training_samples, params))
        if as_json:
            console.print_json(json.dumps({"out": str(target), **summary}), ensure_ascii=True)
        else:
            console.print(summary_table(target, summary))

    return app


def parse_since(text: str | None, now: float) -> float | None:
    """``--since`` as an epoch: an age before ``now`` or a date (ISO, UTC unless it names
    an offset); one line for anything else or a time to come."""
    if text is None:
        return None
    try:
        return now - durations.seconds(text, "--since")
    except durations.DurationTooLong:
        raise
    except durations.DurationError:
        pass  # not an age: a date, or neither
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise AirigError(
            f"--since {durations.shown(text)} is neither an age nor a date",
            "write an age (90s, 30m, 12h, 7d, 4w; whole numbers, at most "
            f"{durations.MAX_DAYS}d) or a date (2026-11-01, 2026-11-01T08:00)",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    stamp = moment.timestamp()
    if stamp > now:
        raise AirigError(f"--since {text} is in the future", "give a date that has passed")
    return stamp


def check_choices(task_type: str, min_quality: str) -> None:
    if task_type not in TYPES:
        raise AirigError(
            f"unknown --type {task_type!r}: the brain keeps training samples of "
            f"{', '.join(TYPES)} tasks only",
            f"give --type {TYPES[0]}",
        )
    if min_quality not in QUALITIES:
        raise AirigError(
            f"unknown --min-quality {min_quality!r}", f"give one of: {', '.join(QUALITIES)}"
        )


def _out_path(value: str) -> Path:
    """--out as a path, a NUL refused as a usage error: click's own Path type stats it,
    which raises ValueError (a traceback) at the lowest click the ranges allow."""
    if "\x00" in value:
        raise typer.BadParameter("a file name has no NUL character")
    return Path(value)


def check_out(out: Path, force: bool) -> Path:
    """The file to write, refused in one line before the brain is asked: a folder that
    does not exist, a folder as the file, a file there without ``--force``."""
    target = out.expanduser()
    folder = target.parent
    try:
        if not folder.is_dir():
            raise AirigError(
                f"the folder {folder} does not exist", "create it, or give another --out"
            )
        if target.is_dir():
            raise AirigError(f"{target} is a folder", "give a file name: --out samples.jsonl")
        taken = target.exists() or target.is_symlink()
    except (OSError, ValueError) as exc:  # a folder it may not enter
        raise AirigError(f"cannot use --out {out}: {exc}", "give another --out") from None
    if taken and not force:
        raise AirigError(f"{target} exists", "give --force to replace it, or another --out")
    return target


def pages(fetch: Callable[[dict[str, Any]], dict[str, Any]], params: dict[str, Any]) -> Iterator[
    dict[str, Any]
]:  # fmt: skip
    """The brain's pages in order, until it says the log ends."""
    cursor: str | None = None
    stalled = 0
    while True:
        page = fetch({**params, **({"cursor": cursor} if cursor else {})})
        if not isinstance(page.get("samples"), list) or not isinstance(page.get("excluded"), dict):
            raise AirigError("the brain answered no training page", "see `logs brain`")
        yield page
        moved = page["samples"] or any(page["excluded"].values())
        following = page.get("next")
        if following is None:
            return
        stalled = 0 if moved or following != cursor else stalled + 1
        if stalled >= STALLED_PAGES:
            raise AirigError(
                "the brain's training log did not advance (rotating under each read?)",
                "run the export again",
            )
        cursor = str(following)


def write_export(target: Path, answers: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """Every page's samples into ``target``, one line per distinct ``messages``, through a
    temporary file renamed when whole; the summary (``exported``, ``excluded`` by reason)."""
    try:
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, renamed
            "w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.",
            suffix=".part", delete=False,
        )  # fmt: skip
    except OSError as exc:
        raise AirigError(
            f"cannot write in {target.parent}: {exc.strerror}", "give --out a writable folder"
        ) from None
    temp = Path(handle.name)
    try:
        with handle:
            summary = _write_lines(handle, answers)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise AirigError(
            f"cannot write {target}: {exc.strerror or exc}", "free space, or give another --out"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    return summary


def _write_lines(handle: IO[str], answers: Iterator[dict[str, Any]]) -> dict[str, Any]:
    seen: set[bytes] = set()  # a digest per line written: 100k lines hold ~10 MB
    excluded: Counter[str] = Counter()
    exported = 0
    for page in answers:
        for reason, count in page["excluded"].items():
            if isinstance(count, int) and not isinstance(count, bool):
                excluded[str(reason)] += count
        for sample in page["samples"]:
            line = chat_line(sample)
            try:
                digest = hashlib.sha256(line.encode()).digest()
            except UnicodeEncodeError:  # a lone surrogate: no UTF-8 file holds it
                excluded["unreadable"] += 1
                continue
            if digest in seen:
                excluded[DUPLICATE] += 1
                continue
            seen.add(digest)
            handle.write(line + "\n")
            exported += 1
    return {"exported": exported, "excluded": dict(sorted(excluded.items()))}


def chat_line(sample: Any) -> str:
    """A sample's line: ``{"messages": [...]}`` alone (OpenAI's format takes no other keys
    but tools), each turn ``role`` and ``content``; the same messages give the same line."""
    messages = sample.get("messages") if isinstance(sample, dict) else None
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise AirigError("the brain answered a sample with no messages", "see `logs brain`")
    turns = [{"role": m["role"], "content": m["content"]} for m in messages]
    return json.dumps({"messages": turns}, ensure_ascii=False, separators=(",", ":"))


def summary_table(target: Path, summary: dict[str, Any]) -> Table:
    table = Table(title=Text(f"{summary['exported']} samples written to {target}"))
    for column in ("left out", "lines", "why"):
        table.add_column(column)
    for reason, count in summary["excluded"].items():
        table.add_row(Text(reason), str(count), Text(REASONS.get(reason, "")))
    if not summary["excluded"]:
        table.caption = "nothing left out"
    return table
