"""The Markdown plan format, read with markdown-it (no hand-rolled Markdown parsing).

    # Plan: Nightly digest                 <- level-1 heading: the plan's name

    Prose anywhere is documentation and is ignored.

    ## transcribe: Transcribe the talk     <- level-2 heading: task id[: display name]
    - type: transcribe                     <- a bullet list of `key: value` (YAML values)
    - priority: 7

    ```yaml                                <- yaml / json block: merged into the payload
    audio: talks/intro.wav
    model: Systran/faster-whisper-small
    ```

    ## summarise
    - type: llm
    - model: qwen2.5:7b-instruct-q4_K_M
    - depends_on: [transcribe]

    ```prompt                              <- prompt / system block: payload.prompt / .system
    Summarise: {{ tasks.transcribe.output }}
    ```

    ## archive
    - type: shell

    ```sh                                  <- sh / bash / shell block: payload.command
    tar czf digest.tgz out/
    ```

The bullet list under a task heading is read as YAML (each item one `key: value`), so
values such as `[a, b]`, `true` or quoted strings mean what they mean in YAML.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from airig.brain.plans.readers import DocumentError, read_json, read_yaml

FIELD_BLOCKS = {"prompt": "prompt", "text": "prompt", "system": "system"}
COMMAND_BLOCKS = {"sh", "bash", "shell"}
PAYLOAD_BLOCKS = {"yaml", "yml", "json"}


class MarkdownPlanError(ValueError):
    """The Markdown does not follow the plan format (the message says where)."""


def _heading_text(tokens: list[Token], index: int) -> str:
    return tokens[index + 1].content.strip()


def _bullet_fields(lines: list[str], token: Token, where: str) -> dict[str, Any]:
    if token.markup != "-":  # YAML reads `- ` as a list item; `*` would be an alias
        raise MarkdownPlanError(f"{where}: write the task fields as `- key: value` bullets")
    start, end = token.map or (0, 0)
    try:
        items = read_yaml("\n".join(lines[start:end]))
    except DocumentError as exc:
        message = f"{where}: the bullet list is not `key: value` items ({exc})"
        raise MarkdownPlanError(message) from None
    fields: dict[str, Any] = {}
    for item in items if isinstance(items, list) else [items]:
        if not isinstance(item, dict) or len(item) != 1:
            got = f"{item!r:.80}"
            raise MarkdownPlanError(f"{where}: each bullet must be one `key: value`, got {got}")
        key = next(iter(item))
        if key in fields:
            raise MarkdownPlanError(f"{where}: the field {key!r:.80} is given twice")
        fields.update(item)
    return fields


def _apply_fence(task: dict[str, Any], token: Token, where: str) -> None:
    language = (token.info or "").strip().split(" ")[0].lower()
    payload = task.setdefault("payload", {})
    if not isinstance(payload, dict):
        raise MarkdownPlanError(
            f"{where}: `- payload: {payload!r:.40}` is not a mapping, so a code block cannot "
            "add to it; give the payload as `- payload: {key: value}` or in code blocks only"
        )
    if language in FIELD_BLOCKS:
        payload[FIELD_BLOCKS[language]] = token.content.rstrip("\n")
    elif language in COMMAND_BLOCKS:
        payload["command"] = token.content.strip()
    elif language in PAYLOAD_BLOCKS:
        try:
            block = read_json(token.content) if language == "json" else read_yaml(token.content)
        except DocumentError as exc:
            message = f"{where}: the {language} block does not parse ({exc})"
            raise MarkdownPlanError(message) from None
        if not isinstance(block, dict):
            raise MarkdownPlanError(f"{where}: the {language} block must be a mapping")
        payload.update(block)
    else:
        raise MarkdownPlanError(
            f"{where}: code block language {language or '(none)'!r} is not one of "
            "yaml, json, prompt, system, sh"
        )


def _new_task(heading: str) -> dict[str, Any]:
    task_id, _, name = heading.partition(":")
    task: dict[str, Any] = {"id": task_id.strip()}
    if name.strip():
        task["name"] = name.strip()
    return task


def parse_markdown(text: str) -> dict[str, Any]:
    """The plan mapping (``name``, ``tasks``) described by a Markdown document."""
    # Only block structure matters (headings, bullet lists, code blocks; a heading's text
    # is read raw). Skipping the inline pass also skips its worst cases: a megabyte of `[`
    # or `*a ` takes it seconds. A parser per call: its rule cache is filled lazily, which
    # is not safe to share between the threads plans are read in.
    tokens = MarkdownIt("commonmark").disable("inline").parse(text)
    lines = text.splitlines()
    plan: dict[str, Any] = {"name": "", "tasks": []}
    task: dict[str, Any] | None = None
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h1":
            heading = _heading_text(tokens, index)
            plan["name"] = heading.removeprefix("Plan:").strip()
        elif token.type == "heading_open" and token.tag == "h2":
            task = _new_task(_heading_text(tokens, index))
            plan["tasks"].append(task)
        elif task is None or token.level != 0:
            continue
        elif token.type == "bullet_list_open":
            task.update(_bullet_fields(lines, token, f"task {task['id']!r}"))
        elif token.type == "fence":
            _apply_fence(task, token, f"task {task['id']!r}")
    return plan
