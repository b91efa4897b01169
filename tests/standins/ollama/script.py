"""Scripted answers (``STANDIN_SCRIPT``): generate and chat answer with canned texts.

The file holds a JSON list of strings. Each generate or chat call with a prompt takes the
first one (the file is rewritten without it, so a test can append more while the server
runs) and the request is appended as one JSON line to ``<script>.requests``, so the test
can read what the model was asked. Once the list is empty, the deterministic reply of
``runtime.reply_words`` comes back as without a script. Everything upstream refuses is
still refused first (an unknown model, an embedding model asked to generate, and, with or
without a script, a ``format`` that is neither "json" nor a JSON-schema object, as Ollama's runner
does (llm/server.go, ``Completion``: ``invalid format: %q; expected "json" or a valid JSON
Schema object``), answered like a runner error (HTTP 500)).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path


def format_error(value: object) -> str | None:
    """The error Ollama's runner gives for this ``format``, or None when it is accepted."""
    if value in (None, "", "json") or isinstance(value, dict):
        return None
    raw = json.dumps(value)
    return f'invalid format: "{raw}"; expected "json" or a valid JSON Schema object'


class Script:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.requests = path.with_name(path.name + ".requests")
        self._lock = threading.Lock()

    def next_answer(self, body: dict) -> str | None:
        with self._lock:
            try:
                answers = json.loads(self.path.read_text())
            except (OSError, ValueError):
                return None
            if not isinstance(answers, list) or not answers:
                return None
            answer = str(answers.pop(0))
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(answers))
            tmp.replace(self.path)
            with self.requests.open("a") as handle:
                handle.write(json.dumps(body) + "\n")
            return answer
