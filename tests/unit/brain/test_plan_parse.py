"""Plan documents: JSON, YAML and the Markdown format all give the same mapping."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from airig.brain.plans.parse import PlanSyntaxError, detect_format, parse_plan

MARKDOWN = textwrap.dedent(
    """\
    # Plan: Nightly digest

    Operators write prose here; it is ignored.

    ## transcribe: Transcribe the talk
    - type: transcribe
    - priority: 7

    ```yaml
    audio: talks/intro.wav
    model: Systran/faster-whisper-small
    ```

    ## summarise
    - type: llm
    - model: qwen2.5:7b
    - depends_on: [transcribe]
    - sensitive: true

    ```prompt
    Summarise: {{ tasks.transcribe.output }}
    ```

    ## archive
    - type: shell
    - depends_on: [summarise]

    ```sh
    tar czf digest.tgz out/
    ```
    """
)

EXPECTED = {
    "name": "Nightly digest",
    "tasks": [
        {
            "id": "transcribe", "name": "Transcribe the talk", "type": "transcribe",
            "priority": 7,
            "payload": {"audio": "talks/intro.wav", "model": "Systran/faster-whisper-small"},
        },
        {
            "id": "summarise", "type": "llm", "model": "qwen2.5:7b",
            "depends_on": ["transcribe"], "sensitive": True,
            "payload": {"prompt": "Summarise: {{ tasks.transcribe.output }}"},
        },
        {
            "id": "archive", "type": "shell", "depends_on": ["summarise"],
            "payload": {"command": "tar czf digest.tgz out/"},
        },
    ],
}  # fmt: skip


def test_markdown_plan_reads_headings_bullets_and_code_blocks():
    assert parse_plan(MARKDOWN, "markdown") == EXPECTED


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_give_the_same_plan(fmt):
    body = json.dumps(EXPECTED) if fmt == "json" else yaml.safe_dump(EXPECTED)
    assert parse_plan(body, fmt) == EXPECTED


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("application/json", "", "json"),
        ("application/yaml; charset=utf-8", "", "yaml"),
        ("text/markdown", "", "markdown"),
        (None, '{"tasks": []}', "json"),
        (None, "# Plan", "markdown"),
        ("", "name: x", "yaml"),
    ],
)
def test_format_detection(content_type, body, expected):
    assert detect_format(content_type, body) == expected


@pytest.mark.parametrize(
    ("body", "fmt", "message"),
    [
        ("{not json", "json", "not valid json"),
        ("name: [unclosed", "yaml", "not valid yaml"),
        ("- just\n- a list", "yaml", "a plan is a mapping"),
        ("name: x\ntasks: []", "yaml", "non-empty 'tasks'"),
        ("# P\n\n## a\n- type: noop\n\n```python\nx\n```\n", "markdown", "not one of"),
        ("# P\n\n## a\n- type noop\n", "markdown", "one `key: value`"),
        ("# P\n\n## a\n- type: noop\n\n```yaml\n- 1\n```\n", "markdown", "must be a mapping"),
        ("# P\n\nno tasks here\n", "markdown", "non-empty 'tasks'"),
    ],
)
def test_unreadable_plans_are_refused_with_a_reason(body, fmt, message):
    with pytest.raises(PlanSyntaxError, match=message):
        parse_plan(body, fmt)


def test_the_examples_in_plans_md_parse_and_validate():
    import re
    from pathlib import Path

    from airig.brain.plans.validate import Limits, validate_plan

    doc = (Path(__file__).resolve().parents[3] / "airig" / "brain" / "PLANS.md").read_text()
    as_yaml = re.search(r"## YAML\n\n```yaml\n(.*?)```\n", doc, re.S).group(1)
    as_markdown = re.search(r"## Markdown\n\n````markdown\n(.*?)````\n", doc, re.S).group(1)
    from_yaml, _ = validate_plan(parse_plan(as_yaml, "yaml"), Limits())
    from_markdown, _ = validate_plan(parse_plan(as_markdown, "markdown"), Limits())
    assert [t.id for t in from_yaml.tasks] == [t.id for t in from_markdown.tasks]
    assert from_yaml.tasks[1].payload == from_markdown.tasks[1].payload
