"""`search "query"`: a table of the nearest entries from the brain, and one line (exit ≠ 0,
no traceback, no request) for bad input, an unknown index, or a brain that is down."""

from __future__ import annotations

import json

import pytest
from support import run_cli

from airig.brain.api.routes import search as search_route
from airig.brain.store import vectors

TOKEN = "admin-secret-token"
EMBED = "nomic-embed-text"


def fake_embedding(model: str, text: str) -> list[float]:
    """A direction per known word: enough to tell the documents apart."""
    words = text.lower().split()
    return [float("gpu" in words), float("budget" in words), 0.1]


@pytest.fixture
def seeded(tmp_path, monkeypatch, brain):
    """The brain fixture with an index 'talks' of two entries, found through the .env."""
    for name in ("BRAIN_URL", "BRAIN_PORT", "AIRIG_BIND_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    data = tmp_path / "data"
    monkeypatch.setattr(brain.app.state.brain.settings, "data_dir", data)
    monkeypatch.setattr(search_route, "embed_query", lambda url, m, t: fake_embedding(m, t))
    entries = [
        vectors.Entry(fake_embedding(EMBED, "gpu"), "the gpu part", "talks/a.mp4", "00:01:02"),
        vectors.Entry(fake_embedding(EMBED, "budget"), "the budget part", "docs/b.pdf", "p. 7"),
    ]
    vectors.replace_task(vectors.index_path(data), "talks", EMBED, "p1", "embed", entries,
                         False, 1.0)  # fmt: skip
    return brain


def test_search_prints_rank_score_source_locator_and_snippet(monkeypatch, capsys, seeded,
                                                             brain_calls):  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, None, "search", "budget", "--recipe", "talks")
    assert code == 0, err
    lines = [line for line in out.splitlines() if "part" in line]
    assert "the budget part" in lines[0] and "docs/b.pdf" in lines[0] and "p. 7" in lines[0]
    assert "the gpu part" in lines[1] and "00:01:02" in lines[1]
    assert brain_calls == [("POST", "http://127.0.0.1:8080/v1/search")]


def test_search_json_is_the_brains_answer(monkeypatch, capsys, seeded):
    code, out, _ = run_cli(monkeypatch, capsys, None, "search", "gpu", "-k", "1", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["index"] == "talks" and answer["model"] == EMBED
    assert [hit["snippet"] for hit in answer["results"]] == ["the gpu part"]


def test_search_list_shows_the_indexes(monkeypatch, capsys, seeded):
    code, out, _ = run_cli(monkeypatch, capsys, None, "search", "--list")
    assert code == 0 and "talks" in out and EMBED in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["search", ""], "no query"),
        (["search", "   "], "no query"),
        (["search", "x", "-k", "0"], "-k 0 is out of range"),
        (["search", "x", "-k", "101"], "-k 101 is out of range"),
        (["search", "x", "--recipe", "Bad Name"], "is not an index name"),
        (["search", "x", "--recipe", "a", "--index", "b"], "name two indexes"),
    ],
)
def test_bad_input_is_one_line_and_no_request(monkeypatch, capsys, seeded, brain_calls, args,
                                              says):  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, None, *args)
    assert code != 0 and says in err and "Traceback" not in err + out
    assert brain_calls == []


def test_an_unknown_index_names_the_known_ones(monkeypatch, capsys, seeded):
    code, _, err = run_cli(monkeypatch, capsys, None, "search", "x", "--index", "nope")
    assert code != 0
    assert "no index 'nope' (known: talks)" in err and "search --list" in err
    assert "Traceback" not in err


def test_a_brain_that_is_down_is_one_line(monkeypatch, capsys, seeded):
    monkeypatch.setenv("BRAIN_URL", "http://brain-is-down.invalid:9")
    code, _, err = run_cli(monkeypatch, capsys, None, "search", "x")
    assert code != 0 and "cannot reach the brain" in err and "Traceback" not in err
