"""`report`: the brain's history per day or week beside the host's tune and update log
lines; ``--json`` is the brain's answer plus ``changes``; bad input, a refusing brain, a
brain that is down and hostile names are one line or plain text; ``--routing`` prints the
advice, or one line from a brain that predates it."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "brain"))
import test_report as history  # noqa: E402 - tests/unit/brain's history of plans

TOKEN = "admin-secret-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
DAY = 86_400.0
HIDDEN = ("\x1b", "\r", "\u202e")


@pytest.fixture
def kit(tmp_path, monkeypatch, capsys, brain):
    """The brain fixture with three days of history and a checkout whose .env finds it."""
    for name in ("BRAIN_URL", "BRAIN_PORT", "AIRIG_BIND_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    base = (time.time() // DAY - 3) * DAY
    history.history(brain.app.state.brain, base)
    capsys.readouterr()  # the brain's event lines, not the command's
    return tmp_path, base


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def write_logs(root: Path, base: float) -> None:
    state = root / ".airig"
    state.mkdir(exist_ok=True)
    (state / "tuning.log").write_text(
        json.dumps({"id": 1, "time": iso(base + DAY + 60), "knob": "OLLAMA_NUM_PARALLEL",
                    "before": "1", "after": "2", "healthy": True, "rollback_of": None}) + "\n"
        + "not json\n"
        + json.dumps({"id": 2, "time": iso(base - 30 * DAY), "knob": "OLD", "before": "1",
                      "after": "2"}) + "\n"
    )  # fmt: skip
    (state / "update.log").write_bytes(
        json.dumps({"time": iso(base + 120), "action": "update", "service": "ollama",
                    "to": {"tag": "0.5.1\x1b[31m", "digest": "sha256:x"}, "ok": True}).encode()
        + b"\n\xff\xfe torn\n[1, 2]\n"
        + json.dumps({"time": "yesterday", "action": "update"}).encode() + b"\n"
    )  # fmt: skip


def test_report_prints_the_history_beside_the_hosts_changes(monkeypatch, capsys, kit):
    root, base = kit
    write_logs(root, base)
    code, out, err = run_cli(monkeypatch, capsys, None, "report", "--since", "7d")
    assert code == 0, err
    day0 = datetime.fromtimestamp(base, UTC).strftime("%Y-%m-%d")
    row = next(line for line in out.splitlines() if day0 in line and " noop " in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells == [day0, "noop", "-", "3", "1", "1", "20.0", "30.0"]
    assert "update: ollama -> 0.5.1" in out and "[31m" not in out
    assert "tune: OLLAMA_NUM_PARALLEL 1 -> 2" in out and "OLD" not in out
    assert "service_down ×2" in out
    assert '<script>alert("x")</script>:7b' in out  # the model's name as text
    assert not [c for c in HIDDEN if c in out]


def test_report_json_is_the_brains_answer_and_the_changes(monkeypatch, capsys, kit, brain):
    root, base = kit
    write_logs(root, base)
    code, out, err = run_cli(monkeypatch, capsys, None, "report", "--since", "2w", "--by",
                             "week", "--json")  # fmt: skip
    assert code == 0, err
    printed = json.loads(out)
    changes = printed.pop("changes")
    answer = brain.get("/v1/report", params={"since": "2w", "by": "week"}, headers=ADMIN).json()
    printed.pop("until"), answer.pop("until")  # the two asks are a moment apart
    printed.pop("since"), answer.pop("since")
    assert printed == answer
    assert [c["kind"] for c in changes] == ["update", "tune"]
    assert changes[0]["what"] == "ollama -> 0.5.1" and changes[1]["ok"] is True


def test_a_model_that_first_runs_after_the_first_day_is_a_change(monkeypatch, capsys, kit):
    code, out, _ = run_cli(monkeypatch, capsys, None, "report", "--json")
    assert code == 0
    (change,) = json.loads(out)["changes"]
    assert change["kind"] == "model" and change["what"].endswith(":7b first ran")


def test_an_empty_history_is_a_report_of_empty_days(monkeypatch, capsys, tmp_path, brain):
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    for name in ("BRAIN_URL", "BRAIN_PORT", "AIRIG_BIND_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    code, out, err = run_cli(monkeypatch, capsys, None, "report", "--since", "3d")
    assert code == 0, err and "tasks" in out
    code, out, _ = run_cli(monkeypatch, capsys, None, "report", "--since", "3d", "--json")
    assert json.loads(out)["changes"] == [] and len(json.loads(out)["buckets"]) in (3, 4)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "7"], "is not a count and a unit"),
        (["--since", "-7d"], "is not a count and a unit"),
        (["--since", "7d\x00"], "is not a count and a unit"),
        (["--since", "9" * 500 + "d"], "is not a count and a unit"),
        (["--by", "month"], "is not day or week"),
        (["--by", "[red]day[/]"], "is not day or week"),
    ],
)
def test_bad_input_is_one_line_and_no_request(monkeypatch, capsys, kit, brain_calls, args,
                                              says):  # fmt: skip
    brain_calls.clear()
    code, out, err = run_cli(monkeypatch, capsys, None, "report", *args)
    assert code != 0 and says in err and "Traceback" not in err + out
    assert len([line for line in err.splitlines() if line.startswith("✘")]) == 1
    assert brain_calls == []


def test_a_since_the_brain_refuses_is_its_one_line(monkeypatch, capsys, kit, brain):
    monkeypatch.setattr(brain.app.state.brain.settings, "retention_days", 0)  # keeps all
    code, out, err = run_cli(monkeypatch, capsys, None, "report", "--since", "999999w")
    assert code != 0 and "Traceback" not in err + out
    (line,) = [line for line in err.splitlines() if line.startswith("✘")]
    assert "the brain refused the report" in line and "more than 366" in line
    assert "plan" not in line


def test_a_brain_that_is_down_is_one_line(monkeypatch, capsys, kit):
    monkeypatch.setenv("BRAIN_URL", "http://brain-is-down.invalid:9")
    code, _, err = run_cli(monkeypatch, capsys, None, "report")
    assert code != 0 and "cannot reach the brain" in err and "Traceback" not in err


class Answer:
    def __init__(self, status: int, body: object) -> None:
        self.status_code, self._body, self.text = status, body, json.dumps(body)

    def json(self) -> object:
        return self._body


def answering(monkeypatch, status: int, body: object) -> list[str]:
    asked: list[str] = []

    def send(method, url, **kwargs):
        asked.append(url)
        return Answer(status, body)

    monkeypatch.setattr("airig.launcher.brain_client.requests.request", send)
    return asked


def test_routing_prints_each_rule_and_its_evidence(monkeypatch, capsys, kit):
    rules = {"rules": [{"rule": "llm tasks of plan \x1b[2Jdocs over 2000 tokens: use qwen2.5:14b",
                        "evidence": {"failed_small": 4, "succeeded_large": 4}}]}  # fmt: skip
    asked = answering(monkeypatch, 200, rules)
    code, out, err = run_cli(monkeypatch, capsys, None, "report", "--routing")
    assert code == 0, err
    assert asked[0].endswith("/v1/report/routing")
    assert "use qwen2.5:14b" in out and "failed_small" in out and "\x1b" not in out
    code, out, _ = run_cli(monkeypatch, capsys, None, "report", "--routing", "--json")
    assert json.loads(out) == json.loads(json.dumps(rules))


def test_routing_from_a_brain_that_predates_it_is_one_line(monkeypatch, capsys, kit):
    answering(monkeypatch, 404, {"detail": "Not Found"})
    code, out, err = run_cli(monkeypatch, capsys, None, "report", "--routing")
    assert code == 1 and "Traceback" not in out + err
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and "predates routing advice" in lines[0]


def test_the_logs_are_read_from_their_end_only(tmp_path, monkeypatch):
    from airig.launcher.cli import report

    monkeypatch.setattr(report, "MAX_LOG_BYTES", 200)
    line = json.dumps({"time": iso(1000.0), "knob": "K", "before": "a", "after": "b"})
    (tmp_path / "tuning.log").write_text("x" * 10_000 + "\n" + line + "\n")
    found = report.changes(tmp_path, {"since": 0, "until": 2000, "buckets": []})
    assert [c["what"] for c in found] == ["K a -> b"]
    assert report.changes(tmp_path / "none", {"since": 0, "until": 1, "buckets": []}) == []


def test_routing_json_is_the_brains_answer_over_the_window_asked(monkeypatch, capsys, kit,
                                                                  brain, brain_calls):  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, None, "report", "--routing", "--json",
                             "--since", "2w")  # fmt: skip
    assert code == 0, err
    assert brain_calls[-1] == ("GET", "http://127.0.0.1:8080/v1/report/routing")
    answer = brain.get("/v1/report/routing", params={"since": "2w"}, headers=ADMIN).json()
    assert json.loads(out) == answer and answer["since"] == "2w"
    code, _, err = run_cli(monkeypatch, capsys, None, "report", "--routing", "--since", "2x")
    assert code != 0 and "is not a count and a unit" in err and "Traceback" not in err
