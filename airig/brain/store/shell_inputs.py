"""A shell task's templates become environment variables, never command text.

Each distinct ``{{ tasks.<id>.output… }}`` in a shell ``command`` is replaced by a
reference to a variable ``AIRIG_INPUT_<n>`` (numbered by first appearance); its value
goes to the worker in ``payload.inputs`` and the shell executor hands it to the child as
environment. The shell only expands the variable, so ``;``, ``$(…)`` or quotes in an
upstream output stay data. The reference is quoted for where the template stands, so the
value still arrives as one word:

- bare: ``echo {{ tasks.a.output }}`` → ``echo "${AIRIG_INPUT_1}"``;
- in double quotes: ``"got {{ tasks.a.output }}"`` → ``"got ${AIRIG_INPUT_1}"``;
- in single quotes: ``'got {{ tasks.a.output }}'`` → ``'got '"${AIRIG_INPUT_1}"''``;
- a list command (run without a shell) with a template runs as ``/bin/sh -c 'exec …'``
  whose literal words are passed as positional parameters, so the program gets the same
  argv as before without any word being re-parsed.

Templates in ``env`` and ``cwd`` are filled in as in any payload: they are values for the
child, not code. The quote state is tracked by the few lines of ``_quote_state`` because
``shlex`` cannot tell where a position stands. A command that re-reads a value as code
(``eval``, ``sh -c "… ${AIRIG_INPUT_1}"``) still can, which is why tainted output never
reaches a shell task at all (``trust.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airig.brain.store import results

INPUT_PREFIX = "AIRIG_INPUT_"
# Where a template stands in a /bin/sh command: bare, inside "…" or inside '…'.
BARE, DOUBLE, SINGLE = "", '"', "'"
Texts = dict[tuple[str, str], str]


def substitute(payload: dict[str, Any], texts: Texts) -> dict[str, Any]:
    """The shell payload to hand a worker, from the texts ``results.fill_texts`` made:
    templates in ``command`` become variable references with their values in
    ``inputs``; those in the other fields are filled in."""
    variables = _Variables(texts)
    command = payload.get("command")
    if isinstance(command, str):
        command = _string_command(command, variables.reference)
    elif isinstance(command, list) and any(results.TEMPLATE.search(word) for word in command):
        command = _list_command(command, variables.reference)
    rest = results.substitute({k: v for k, v in payload.items() if k != "command"}, texts)
    if variables.inputs:
        rest["inputs"] = variables.inputs
    return {"command": command, **rest} if "command" in payload else rest


def command_with_variables(
    command: str | list[str], pattern: re.Pattern[str], reference: Callable[[re.Match[str]], str]
) -> str | list[str]:
    """``command`` with each match of ``pattern`` replaced by the quoted reference to the
    variable ``reference`` names for it (a fan-out item's fields, ``plans/fanout.py``)."""
    if isinstance(command, str):
        return _string_command(command, reference, pattern)
    if any(pattern.search(word) for word in command):
        return _list_command(command, reference, pattern)
    return command


class _Variables:
    """One variable per distinct template (upstream task and field)."""

    def __init__(self, texts: Texts) -> None:
        self.texts = texts
        self.names: dict[tuple[str, str], str] = {}
        self.inputs: dict[str, str] = {}

    def reference(self, match: re.Match[str]) -> str:
        """The variable's name for this template (given its value on first sight)."""
        key = (match.group(1), match.group(2))
        if key not in self.names:
            self.names[key] = f"{INPUT_PREFIX}{len(self.names) + 1}"
            self.inputs[self.names[key]] = self.texts[key]
        return self.names[key]


def _quote_state(text: str, state: str) -> str:
    """The quote state after ``text`` when it starts in ``state`` (POSIX sh rules: no
    escape inside '…'; a backslash escapes the next character elsewhere)."""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif state == SINGLE:
            state = BARE if char == SINGLE else state
        elif char == "\\":
            escaped = True
        elif char == DOUBLE or (state == BARE and char == SINGLE):
            state = BARE if state == char else char
    return state


def _quoted(name: str, state: str) -> str:
    if state == DOUBLE:
        return f"${{{name}}}"
    if state == SINGLE:  # close the single quotes, expand, open them again
        return f"'\"${{{name}}}\"'"
    return f'"${{{name}}}"'


def _string_command(
    command: str,
    reference: Callable[[re.Match[str]], str],
    pattern: re.Pattern[str] = results.TEMPLATE,
) -> str:
    parts, state, end = [], BARE, 0
    for match in pattern.finditer(command):
        literal = command[end : match.start()]
        state = _quote_state(literal, state)
        parts += [literal, _quoted(reference(match), state)]
        end = match.end()
    parts.append(command[end:])
    return "".join(parts)


def _list_command(
    words: list[str],
    reference: Callable[[re.Match[str]], str],
    pattern: re.Pattern[str] = results.TEMPLATE,
) -> list[str]:
    """``/bin/sh -c 'exec "${1}""${AIRIG_INPUT_1}" …' sh <literal pieces…>``: the same
    argv, with each template's value expanded from the environment."""
    literals: list[str] = []
    script: list[str] = []
    for word in words:
        pieces, end = [], 0
        for match in pattern.finditer(word):
            if match.start() > end:
                literals.append(word[end : match.start()])
                pieces.append(f'"${{{len(literals)}}}"')
            pieces.append(f'"${{{reference(match)}}}"')
            end = match.end()
        if end < len(word) or not pieces:
            literals.append(word[end:])
            pieces.append(f'"${{{len(literals)}}}"')
        script.append("".join(pieces))
    return ["/bin/sh", "-c", "exec " + " ".join(script), "sh", *literals]
