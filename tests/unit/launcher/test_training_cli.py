"""`training export --out FILE`: chat JSONL from the brain's pages, duplicates dropped, a
summary of what was left out and why; bad input one line with nothing asked or written;
the file whole or absent (a failure at any step leaves no part of it); 100k samples in
bounded memory."""

from __future__ import annotations

import errno
import json
import os
import tracemalloc

import pytest
from support import error_lines, one_error, run_cli, unprivileged

from airig.common.errors import AirigError
from airig.launcher.cli import training

TOKEN = "admin-secret-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
LLM = {"type": "llm", "model": "m"}


@pytest.fixture
def kit(tmp_path, monkeypatch, brain):
    """The brain fixture, found through this checkout's .env; returns (client, brain)."""
    for name in ("BRAIN_URL", "BRAIN_PORT", "AIRIG_BIND_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    return brain, brain.app.state.brain


def printed_json(shown: str) -> dict:
    """The summary --json printed (the in-process brain prints its event lines too)."""
    return json.loads(shown[shown.index("{\n") :])


def seed(kit, lines) -> str:
    """A plan of llm tasks a..e and these log lines ((key, outcome, prompt, response))."""
    client, brain = kit
    tasks = [{**LLM, "id": key, "payload": {"prompt": key}} for key in "abcde"]
    plan = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks}).json()
    log = brain.settings.training_file
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as handle:
        for key, outcome, prompt, response, *extra in lines:
            line = {"timestamp": 2e9 - 100, "plan": plan["id"], "task_id": key, "model": "m",
                    "prompt": prompt, "response": response, "outcome": outcome,
                    **(extra[0] if extra else {})}  # fmt: skip
            handle.write(json.dumps(line) + "\n")
    return plan["id"]


LINES = [
    ("a", "succeeded", "what is 2+2?", "4"),
    ("b", "succeeded", "what is 2+2?", "4"),  # the same chat as a: written once
    ("c", "failed", "why?", None),
    ("d", "succeeded", "my password=hunter2hunter2 ok", "sk-" + "Ab1" * 8),
    ("e", "succeeded", None, None, {"redacted": "sensitive"}),
]


def test_export_writes_chat_jsonl_and_a_summary_of_what_was_left_out(
    monkeypatch, capsys, kit, tmp_path
):  # fmt: skip
    seed(kit, LINES)
    out = tmp_path / "samples.jsonl"
    code, shown, err = run_cli(monkeypatch, capsys, None, "training", "export", "--out", str(out))
    assert code == 0, err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [
        {"messages": [{"role": "user", "content": "what is 2+2?"},
                      {"role": "assistant", "content": "4"}]},
        {"messages": [{"role": "user", "content": "my password=[REDACTED] ok"},
                      {"role": "assistant", "content": "[REDACTED]"}]},
    ]  # fmt: skip
    assert "hunter2" not in out.read_text() and "Ab1Ab1" not in out.read_text()
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    assert "2 samples written" in shown
    rows = {r: line for line in shown.splitlines() for r in training.REASONS if f"│ {r} " in line}
    assert set(rows) == {"duplicate", "failed", "sensitive"}
    assert " 1 " in rows["duplicate"] and "same messages" in rows["duplicate"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_json_summary_counts_match_what_was_left_out(monkeypatch, capsys, kit, tmp_path):
    seed(kit, LINES)
    out = tmp_path / "s.jsonl"
    out.write_text("old\n")
    args = ("training", "export", "--out", str(out), "--force", "--json", "--since", "7d")
    code, shown, err = run_cli(monkeypatch, capsys, None, *args)
    assert code == 0, err
    summary = printed_json(shown)
    assert summary == {
        "out": str(out), "exported": 2,
        "excluded": {"duplicate": 1, "failed": 1, "sensitive": 1},
    }  # fmt: skip
    assert len(out.read_text().splitlines()) == summary["exported"]


def test_since_and_min_quality_reach_the_brain(monkeypatch, capsys, kit, tmp_path):
    old = ("b", "succeeded", "q", "r", {"timestamp": 1_600_000_000.0})  # 2020-09-13
    plan = seed(kit, [LINES[0], old])
    _, brain = kit
    brain.write(lambda conn, outbox, _: conn.execute(
        "UPDATE tasks SET task_errors = 1 WHERE plan_id = ? AND key = 'a'", (plan,)))  # fmt: skip
    args = ("training", "export", "--out", str(tmp_path / "o.jsonl"), "--json",
            "--since", "2021-01-01", "--min-quality", "first-try")  # fmt: skip
    code, shown, err = run_cli(monkeypatch, capsys, None, *args)
    assert code == 0, err
    assert printed_json(shown)["excluded"] == {"below_quality": 1, "before_since": 1}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--out", "{tmp}/missing/x.jsonl"], "does not exist"),
        (["--out", "{tmp}/taken.jsonl"], "exists"),
        (["--out", "{tmp}"], "is a folder"),
        (["--out", "{tmp}/x.jsonl", "--since", "yesterday"], "neither an age nor a date"),
        (["--out", "{tmp}/x.jsonl", "--since", "2999-01-01"], "in the future"),
        (["--out", "{tmp}/x.jsonl", "--since", "99999w"], "more than 3650 days"),
        (["--out", "{tmp}/x.jsonl", "--since", "1.5h"], "neither an age nor a date"),
        (["--out", "{tmp}/x.jsonl", "--since", "７d"], "neither an age nor a date"),
        (["--out", "{tmp}/x.jsonl", "--type", "shell"], "unknown --type"),
        (["--out", "{tmp}/x.jsonl", "--min-quality", "best"], "unknown --min-quality"),
    ],
)
def test_bad_input_is_one_line_with_nothing_asked_or_written(
    monkeypatch, capsys, kit, tmp_path, brain_calls, args, says
):  # fmt: skip
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "taken.jsonl").write_text("keep me\n")
    filled = [arg.replace("{tmp}", str(folder)) for arg in args]
    code, _, err = run_cli(monkeypatch, capsys, None, "training", "export", *filled)
    one_error(code, err, says)
    assert brain_calls == []
    assert sorted(p.name for p in folder.iterdir()) == ["taken.jsonl"]
    assert (folder / "taken.jsonl").read_text() == "keep me\n"


@pytest.mark.parametrize("args", [[], ["--out", "a\x00b.jsonl"]])
def test_no_out_or_a_nul_in_it_is_a_usage_error(monkeypatch, capsys, kit, brain_calls, args):
    code, _, err = run_cli(monkeypatch, capsys, None, "training", "export", *args)
    assert code == 2 and "Traceback" not in err and "--out" in err
    assert len(error_lines(err)) == 1 and brain_calls == []


def test_a_read_only_folder_is_one_line_and_nothing_written(reachable_tmp):
    folder = reachable_tmp / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    outcome = unprivileged(lambda: training.write_export(folder / "x.jsonl", iter([])))
    assert outcome is not None and outcome[0] == "AirigError"
    assert "cannot write in" in outcome[1]
    assert list(folder.iterdir()) == []


def page(samples, excluded=None, following=None):
    return {"samples": samples, "excluded": excluded or {}, "next": following}


def chat(text):
    return {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]}


@pytest.mark.parametrize("failure", [AirigError("cannot reach the brain", "up"), KeyboardInterrupt])
def test_a_failure_mid_export_leaves_no_file_and_the_old_one_whole(tmp_path, failure):
    out = tmp_path / "s.jsonl"
    out.write_text("the old export\n")

    def answers():
        yield page([chat("one"), chat("two")], following="1:2:3:4")
        raise failure

    with pytest.raises(failure if isinstance(failure, type) else type(failure)):
        training.write_export(out, answers())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]
    assert out.read_text() == "the old export\n"


def test_a_full_disk_is_one_line_and_no_part_left(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(training.os, "fsync", full)
    with pytest.raises(AirigError, match="No space left"):
        training.write_export(tmp_path / "s.jsonl", iter([page([chat("one")])]))
    assert list(tmp_path.iterdir()) == []


def test_pages_follow_the_cursor_and_a_stalled_log_ends_in_one_line():
    asked = []

    def fetch(params):
        asked.append(params.get("cursor"))
        return page([], {"unreadable": 1}, "c2") if len(asked) == 1 else page([], {}, None)

    assert len(list(training.pages(fetch, {}))) == 2 and asked == [None, "c2"]
    with pytest.raises(AirigError, match="did not advance"):
        list(training.pages(lambda params: page([], {}, "same"), {}))


def test_100k_samples_stream_in_bounded_memory_and_duplicates_go(tmp_path):
    def answers():  # 100 pages of 1000, made as they are asked for; every 10th a repeat
        for number in range(100):
            samples = [
                chat(f"question {n if n % 10 else 0} " + "x" * 300)
                for n in range(number * 1000, number * 1000 + 1000)
            ]  # fmt: skip
            yield page(samples, {"failed": 1}, following=str(number))

    out = tmp_path / "big.jsonl"
    tracemalloc.start()
    try:
        summary = training.write_export(out, answers())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary == {"exported": 90_001, "excluded": {"duplicate": 9_999, "failed": 100}}
    assert out.stat().st_size > 30_000_000
    assert peak < 20 * 1024 * 1024  # a page and a digest per line, never the 30 MB


def test_a_sample_with_a_lone_surrogate_is_counted_not_a_crash(tmp_path):
    out = tmp_path / "s.jsonl"
    summary = training.write_export(out, iter([page([chat("\ud800"), chat("fine")])]))
    assert summary == {"exported": 1, "excluded": {"unreadable": 1}}
    assert "fine" in out.read_text()


def test_since_reads_ages_and_dates():
    now = 2_000_000_000.0
    assert training.parse_since("7d", now) == now - 7 * 86_400
    assert training.parse_since("2026-11-01", now) == 1_793_491_200.0  # UTC
    assert training.parse_since("2026-11-01T00:00+01:00", now) == 1_793_487_600.0
    assert training.parse_since(None, now) is None


def test_a_failed_rename_leaves_the_old_file_and_no_part(tmp_path, monkeypatch):
    out = tmp_path / "s.jsonl"
    out.write_text("the old export\n")

    def refused(src, dst):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(training.os, "replace", refused)
    with pytest.raises(AirigError, match="cannot write"):
        training.write_export(out, iter([page([chat("one")])]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]
    assert out.read_text() == "the old export\n"
