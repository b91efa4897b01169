"""`search "query"`: a table of the nearest entries from the brain, and one line (exit ≠ 0,
no traceback, no request) for bad input, an unknown index, or a brain that is down."""

from __future__ import annotations

import json

import pytest
from support import run_cli

from airig.brain.api.routes import search as search_route
from airig.brain.store import vectors
from airig.launcher.cli.search import printable, results_table

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
                         vectors.Writer(), 1.0)  # fmt: skip
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


HOSTILE_SNIPPET = (
    "\r\x1b[2K\x1b[1Gthe gpu part, looks trusted\u202e\u2066 \x9b31m\x07"
    "\x1b]0;title\x07 \u200b\u2028end"
)


def seed_hostile(seeded, source, locator, snippet=HOSTILE_SNIPPET):
    data = seeded.app.state.brain.settings.data_dir
    entry = vectors.Entry(fake_embedding(EMBED, "gpu"), snippet, source, locator)
    vectors.replace_task(vectors.index_path(data), "talks", EMBED, "p2", "embed", [entry],
                         vectors.Writer(untrusted=True), 2.0)  # fmt: skip


HIDDEN = ("\x1b", "\r", "\x9b", "\x07", "\u202e", "\u2066", "\u200b", "\u2028")


def test_a_snippet_cannot_hide_its_untrusted_marker(monkeypatch, capsys, seeded):
    seed_hostile(seeded, "talks/\x1b[8mhidden\x1b[0m.mp4", "00:00:01\r")
    code, out, err = run_cli(monkeypatch, capsys, None, "search", "gpu", "-k", "1")
    assert code == 0, err
    assert not [c for c in HIDDEN if c in out]
    line = next(line for line in out.splitlines() if "looks trusted" in line)
    assert "[untrusted] the gpu part, looks trusted" in line  # on the line, in front
    assert "talks/hidden.mp4" in line and "[8m" not in out and "title" not in out


def test_source_and_locator_are_clipped(monkeypatch, capsys, seeded):
    seed_hostile(seeded, "s" * 199 + "SOURCE-TAIL", "l" * 79 + "LOCATOR-TAIL", "gpu words")
    code, out, err = run_cli(monkeypatch, capsys, None, "search", "gpu", "-k", "1")
    assert code == 0, err
    shown = "".join(out.split())
    assert "SOURCE-TAIL" not in shown and "LOCATOR-TAIL" not in shown
    hit = {"score": 0.5, "source": "s" * 199 + "SOURCE-TAIL", "locator": "l" * 300,
           "snippet": "x", "untrusted": False}  # fmt: skip
    table = results_table({"index": "talks", "model": EMBED, "results": [hit]})
    source, locator = (str(table.columns[n]._cells[0]) for n in (2, 3))
    assert source == "s" * 199 + "…" and locator == "l" * 79 + "…"


def test_printable_keeps_plain_text_and_takes_out_the_rest():
    assert printable("Café 東京 — page 7", 80) == "Café 東京 — page 7"
    assert printable("a\x1b[31mred\x1b[0m\tb\r\nc", 80) == "ared b c"
    assert printable("x\u202egnp.exe", 80) == "xgnp.exe"
    assert printable(None, 80) == "" and printable(12, 80) == "12"
    assert printable("abcdef", 4) == "abc…"


def test_json_output_carries_no_raw_control_or_bidi_character(monkeypatch, capsys, seeded):
    seed_hostile(seeded, "a\u202eb.mp4", None)
    code, out, _ = run_cli(monkeypatch, capsys, None, "search", "gpu", "-k", "1", "--json")
    assert code == 0
    assert not [c for c in HIDDEN if c in out]
    assert json.loads(out)["results"][0]["snippet"] == HOSTILE_SNIPPET  # the same JSON


@pytest.mark.parametrize("args", [("search", "gpu"), ("search", "--list")])
def test_a_garbage_index_is_one_line_with_the_fix(monkeypatch, capsys, seeded, args):
    path = vectors.index_path(seeded.app.state.brain.settings.data_dir)
    for stale in path.parent.glob("search.sqlite*"):
        stale.unlink()
    path.write_bytes(b"not a database" * 100)
    code, out, err = run_cli(monkeypatch, capsys, None, *args)
    assert code != 0 and "Traceback" not in err + out
    assert "the search index is unavailable" in err and "file is not a database" in err
    assert "move index/search.sqlite" in err and "HTTP 503" not in err
