"""The launcher's settings declaration against what users read: .env.example and the
manual's configuration page (docs/configuration.md).

``airig/launcher/settings.py`` declares every key the launcher reads, once, with its type,
default, help and stack. The rules held here:

- Every declared key a user sets in .env appears in .env.example, under a comment, in the
  section of its stack; only ``BRAIN_URL`` is not there (it is for the CLI's environment,
  pointing `submit` and friends at another brain).
- Every key of .env.example is declared, or belongs to the other group: knobs of the
  containers (Ollama tuning, the brain's scheduling and thermal limits, the workers'
  prefetch, the file service's upload limit, the provisioners' model lists) that the
  launcher never reads and compose passes through. That group is defined by what it is:
  a compose file interpolates the key (``${KEY…}``); a key in neither group would be a
  knob nobody reads.
- The example's value is the declared default, except where the example chooses on
  purpose (secrets to generate, the models to pull); compose's own fallbacks
  (``${KEY:-default}``) agree with the declared defaults too.
- docs/configuration.md's "Settings" table is generated from the declaration: on a
  difference this test prints the table to paste between the markers.

A key the launcher shares with another side takes its default, bounds and help from
``airig/common/shared_settings.py``; ``test_settings_declared_once.py`` holds every settings
module to that.
"""

from __future__ import annotations

import re
from pathlib import Path

from dotenv import dotenv_values

from airig.launcher.images import VARIABLE
from airig.launcher.settings import FIELD_OF, PORTS, REPORTABLE, Settings, env_text, knob_extra

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / ".env.example"
CONFIGURATION = ROOT / "docs" / "configuration.md"
TABLE_START = "<!-- settings table: generated from airig/launcher/settings.py -->"
TABLE_END = "<!-- end of the settings table -->"
# Where .env.example's value is not the default, on purpose.
EXAMPLE_CHOOSES = {
    "BRAIN_ADMIN_TOKEN": "change-me: `up` replaces it with a generated secret",
    "WORKER_BOOTSTRAP_TOKEN": "change-me: `up` replaces it with a generated secret",
    "AIRIG_GATEWAY_TOKEN": "change-me: `up` replaces it with a generated secret",
    "AIRIG_OLLAMA_MODELS": "the models a fresh kit pulls; unset, it pulls none",
    "AIRIG_WHISPER_MODELS": "the models a fresh kit pulls; unset, it pulls none",
}
# Compose fallbacks that differ from the declared default, and why.
COMPOSE_FALLS_BACK = {
    "AIRIG_JOIN_BRAIN_URL": "empty = not joined, so the workers use this rig's own brain",
    "AIRIG_JOIN_TOKEN": "empty = not joined, so the workers use the bootstrap token",
}


def declared_for_users() -> list[str]:
    return [key for key in FIELD_OF if knob_extra(key).get("in_env_example", True)]


def example_sections() -> dict[str, tuple[str, bool]]:
    """key -> (the section it is in, whether a comment heads its block of KEY= lines)."""
    found: dict[str, tuple[str, bool]] = {}
    section, commented = "general", False
    for line in EXAMPLE.read_text().splitlines():
        rule = re.match(r"^# -+ (\S+)$", line)
        if rule:
            section, commented = rule[1], False
        elif line.startswith("#"):
            commented = True
        elif "=" in line:
            found[line.split("=", 1)[0].strip()] = (section, commented)
        else:  # a blank line ends the block its comment was about
            commented = False
    return found


def compose_text() -> str:
    return "".join(path.read_text() for path in sorted(ROOT.glob("0*/compose*.yaml")))


def test_every_declared_key_is_in_the_example_under_a_comment_in_its_stack() -> None:
    sections = example_sections()
    missing = [key for key in declared_for_users() if key not in sections]
    assert missing == [], f"declared, but not in .env.example: {missing}"
    wrong = {key: sections[key][0] for key in sections if key in FIELD_OF}
    wrong = {k: v for k, v in wrong.items() if v != knob_extra(k)["stack"]}
    assert wrong == {}, f"in another .env.example section than their declared stack: {wrong}"
    bare = [key for key, (_, commented) in sections.items() if not commented]
    assert bare == [], f"no comment above these keys in .env.example: {bare}"


def test_every_example_key_is_declared_or_passed_through_by_compose() -> None:
    text = compose_text()
    undeclared = [key for key in example_sections() if key not in FIELD_OF]
    nobody = [key for key in undeclared if "${" + key not in text]
    assert nobody == [], f"in .env.example, but neither the launcher nor compose reads: {nobody}"
    cli_only = [key for key in FIELD_OF if key not in declared_for_users()]
    assert cli_only == ["BRAIN_URL"]


def test_example_values_and_compose_fallbacks_are_the_declared_defaults() -> None:
    example = dotenv_values(EXAMPLE)
    differ = {
        key: (example[key], default(key))
        for key in declared_for_users()
        if example[key] != default(key) and key not in EXAMPLE_CHOOSES
    }
    assert differ == {}, f".env.example value vs declared default: {differ}"
    fallbacks = set(re.findall(r"\$\{(\w+):?-([^}]*)\}", compose_text()))
    differ = {
        key: (value, default(key))
        for key, value in fallbacks
        if key in FIELD_OF and value != default(key) and key not in COMPOSE_FALLS_BACK
    }
    assert differ == {}, f"compose fallback vs declared default: {differ}"


def test_the_tables_of_keys_name_declared_knobs() -> None:
    """Code driven by key tables (image pins, host ports) reads them by name."""
    assert set(VARIABLE.values()) <= set(FIELD_OF)
    assert set(PORTS) <= set(FIELD_OF)


def default(key: str) -> str:
    return env_text(Settings.model_fields[FIELD_OF[key]].default)


def settings_table() -> str:
    """The Settings table: one row per declared key, in declaration (= .env.example) order."""
    rows = ["| setting | default | stack | what |", "|---|---|---|---|"]
    for key, name in FIELD_OF.items():
        field = Settings.model_fields[name]
        shown = f"`{default(key)}`" if default(key) else "(empty)"
        stack = knob_extra(key)["stack"]
        stack = "CLI, environment only" if stack == "cli" else stack
        help_text = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{key}` | {shown} | {stack} | {help_text} |")
    return "\n".join(rows)


def test_the_settings_table_is_the_declaration() -> None:
    text = CONFIGURATION.read_text()
    assert TABLE_START in text and TABLE_END in text, f"{CONFIGURATION.name} lacks {TABLE_START}"
    current = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    expected = settings_table()
    assert current == expected, (
        f"docs/configuration.md's settings table differs from airig/launcher/settings.py; put this "
        f"between its markers:\n\n{expected}\n"
    )


def test_a_bug_report_shows_only_declared_knobs_not_marked_secret() -> None:
    """`doctor --json` prints the values of REPORTABLE keys only. A knob whose name or help
    says it holds a credential must be marked ``secret=True`` (which also keeps it out of
    every repr, hence out of tracebacks)."""
    secret = {key for key in FIELD_OF if knob_extra(key).get("secret")}
    assert set(FIELD_OF) - secret == REPORTABLE
    assert {"BRAIN_ADMIN_TOKEN", "WORKER_BOOTSTRAP_TOKEN", "AIRIG_JOIN_TOKEN"} <= secret
    for key in FIELD_OF:
        field = Settings.model_fields[FIELD_OF[key]]
        says = re.search(r"(^|_)(TOKEN|PASSWORD|SECRET|KEY|CREDENTIAL)(_|$)", key) or "secret" in (
            field.description or ""
        )
        assert not says or key in secret, f"{key} looks like a secret: mark it secret=True"
        assert field.repr == (key not in secret), key
