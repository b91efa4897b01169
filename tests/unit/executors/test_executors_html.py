"""The html executor: an HTML page's text (inscriptis), written under outputs/, and its
chunks as documents an embed task indexes, each with the page's title and source. Hostile
pages: NUL and control characters, a lying encoding, deep nesting, no text at all, a page
larger than any article, a path out of outputs/, a link where the text goes."""

from __future__ import annotations

import pytest
from support_zim import ARTICLES

from airig.common.task_schemas import EmbedPayload
from airig.executors import html
from airig.executors.base import run_task
from airig.executors.context import TaskError


@pytest.fixture
def ctx(make_ctx):
    ctx = make_ctx()
    (ctx.data_dir / "outputs").mkdir()
    (ctx.data_dir / "inputs").mkdir()
    return ctx


def page(ctx, content: bytes | str, name: str = "page.html") -> str:
    path = ctx.data_dir / "inputs" / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return f"inputs/{name}"


def run(ctx, html_path: str, **fields):
    payload = {"html": html_path, "path": "outputs/wiki/page.txt", **fields}
    return run_task("html", payload, ctx).output


def test_an_article_becomes_text_a_file_and_documents_for_the_index(ctx):
    source = page(ctx, ARTICLES[0][3])
    out = run(ctx, source, title="Volcano", source="Volcano (inputs/wiki.zim/Volcano)")
    text = (ctx.data_dir / "outputs" / "wiki" / "page.txt").read_text()
    assert text.startswith("Volcano\n\n")
    assert "A volcano is a rupture in the crust" in text and "* first point" in text
    assert "script words" not in text and "color:red" not in text  # no script, no style
    assert out["path"] == "outputs/wiki/page.txt" and out["bytes"] == len(text.encode())
    (document,) = out["documents"]
    assert document["source"] == "Volcano (inputs/wiki.zim/Volcano)"
    assert document["locator"] == "part 1" and document["text"].startswith("Volcano\n\n")
    # what the embed task downstream reads, as the template inserts it
    EmbedPayload.model_validate({"model": "m", "index": "wiki", "documents": out["documents"]})


def test_a_long_article_is_chunked_by_paragraphs_within_the_limit(ctx):
    paragraphs = [f"Paragraph {n} " + "word " * (40 + n) for n in range(60)]
    source = page(ctx, "<html><body>" + "".join(f"<p>{p}</p>" for p in paragraphs) + "</body>")
    out = run(ctx, source, chunk_chars=500)
    pieces = [d["text"] for d in out["documents"]]
    assert len(pieces) > 10 and all(len(p) <= 500 for p in pieces)
    assert [d["locator"] for d in out["documents"]] == [f"part {n}" for n in
                                                        range(1, len(pieces) + 1)]  # fmt: skip
    joined = " ".join(" ".join(p.split()) for p in pieces)
    assert all(" ".join(p.split()) in joined for p in paragraphs)  # nothing lost, none cut
    assert out["documents"][0]["source"] == source  # no source given: the page's path


def test_one_paragraph_longer_than_a_chunk_is_cut_at_spaces(ctx):
    words = " ".join(f"w{n}" for n in range(2000))
    out = run(ctx, page(ctx, f"<p>{words}</p>"), chunk_chars=300)
    pieces = [d["text"] for d in out["documents"]]
    assert all(len(p) <= 300 for p in pieces) and " ".join(pieces) == words
    unbroken = "x" * 1000  # no space to cut at: cut at the limit
    out = run(ctx, page(ctx, f"<p>{unbroken}</p>", "b.html"), chunk_chars=300)
    assert "".join(d["text"] for d in out["documents"]) == unbroken


def test_more_chunks_than_one_embed_task_takes_are_counted_not_hidden(ctx, monkeypatch):
    monkeypatch.setattr(html, "MAX_EMBED_INPUTS", 3)
    out = run(ctx, page(ctx, "".join(f"<p>{'z ' * 100}{n}</p>" for n in range(10))),
              chunk_chars=300)  # fmt: skip
    assert len(out["documents"]) == 3 and out["documents_left_out"] == 7


@pytest.mark.parametrize("content", [
    b"", b"   \n", b"<html><head><script>only()</script></head><body></body></html>",
    b"<!-- a comment only -->",
], ids=["empty", "blank", "script-only", "comment-only"])  # fmt: skip
def test_a_page_without_text_writes_its_title_and_indexes_nothing(ctx, content):
    out = run(ctx, page(ctx, content), title="Empty")
    assert out["documents"] == [] and out["chars"] == 0
    assert (ctx.data_dir / "outputs" / "wiki" / "page.txt").read_text() == "Empty\n"


def test_hostile_bytes_are_read_not_fatal(ctx):
    content = (b"\xef\xbb\xbf<p>nul\x00here \x01\x1b[31m and \xff\xfe bad utf-8</p>"
               b"<p>caf\xc3\xa9</p>")  # fmt: skip
    out = run(ctx, page(ctx, content))
    text = out["documents"][0]["text"]
    assert "\x00" not in text and "\x1b" not in text and "\x01" not in text
    assert "café" in text and "\ufffd" in text  # bad bytes shown as such, never guessed
    deep = "<div>" * 50_000 + "deep text" + "</div>" * 50_000  # no recursion to blow
    run(ctx, page(ctx, deep, "deep.html"))
    soup = "<p>" + "<b><i>" * 5000 + "unclosed & < > &amp;&#0;&#xD800;"
    run(ctx, page(ctx, soup, "soup.html"))


def test_a_page_larger_than_any_article_is_refused_before_it_is_read(ctx, monkeypatch):
    monkeypatch.setattr(html, "MAX_HTML_BYTES", 100)
    with pytest.raises(TaskError) as refused:
        run(ctx, page(ctx, "<p>" + "x" * 200 + "</p>"))
    assert refused.value.error_type == "bad_input" and "over 100" in str(refused.value)


@pytest.mark.parametrize("where", ["inputs/page.txt", "index/search.sqlite", "../x.txt",
                                   "/etc/x.txt", "outputs"])  # fmt: skip
def test_the_text_is_written_under_outputs_only(ctx, where):
    source = page(ctx, "<p>x</p>")
    with pytest.raises(TaskError) as refused:
        run_task("html", {"html": source, "path": where}, ctx)
    assert refused.value.error_type == "bad_input"
    assert not (ctx.data_dir / "inputs" / "page.txt").exists()


def test_a_missing_page_or_a_folder_is_one_error(ctx):
    with pytest.raises(TaskError) as refused:
        run(ctx, "inputs/missing.html")
    assert "not on the data volume" in str(refused.value)
    (ctx.data_dir / "outputs" / "wiki" / "page.txt").mkdir(parents=True)
    with pytest.raises(TaskError) as refused:
        run(ctx, page(ctx, "<p>x</p>"))
    assert "is a folder" in str(refused.value)


def test_a_link_where_the_text_goes_is_replaced_not_written_through(ctx, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    (ctx.data_dir / "outputs" / "wiki").mkdir()
    (ctx.data_dir / "outputs" / "wiki" / "page.txt").symlink_to(outside)
    run(ctx, page(ctx, "<p>new text</p>"))
    assert outside.read_text() == "kept"
    assert (ctx.data_dir / "outputs" / "wiki" / "page.txt").read_text() == "new text\n"
