"""The dashboard's Search page in a real headless Chromium (issue 39 §4): a real brain and
worker index a talk's keyframes (ffmpeg on a generated video) and its notes with the
Ollama stand-in's embeddings; the page asks the brain's search API and shows each hit's
source, timestamp or page, snippet and score, the keyframe of the video hit, and an
untrusted task's hit marked "[untrusted]", whose hostile snippet stays text."""

from __future__ import annotations

import pytest
import requests
from brain_procs import ADMIN_TOKEN, Cluster
from dashboard_browser import Dashboard, browser_missing, chromium
from standins.conftest_helpers import start_standin
from support_media import make_video

pytestmark = pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "")
EMBED = "nomic-embed-text"
HOSTILE = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
           ' volcano eruption plans </div><b>bold</b>')  # fmt: skip


def test_the_search_page_finds_shows_keyframes_and_keeps_hostile_text_as_text(tmp_path):
    root = tmp_path / "cluster"
    (root / "data" / "in").mkdir(parents=True)
    make_video(root / "data" / "in" / "talk.mp4")
    ollama = start_standin("ollama", tmp_path / "ollama", {"STANDIN_MODEL_BYTES": "4096"})
    requests.post(f"{ollama.url}/api/pull", json={"model": EMBED, "stream": False},
                  timeout=30).raise_for_status()  # fmt: skip
    cluster = Cluster(root, services={"OLLAMA_URL": ollama.url},
                      brain_env={"BRAIN_DATA_DIR": str(root / "data"),
                                 "BRAIN_OLLAMA_URL": ollama.url})  # fmt: skip
    plan = {"name": "talk", "tasks": [
        {"id": "keyframes", "type": "frames", "payload": {"video": "in/talk.mp4", "width": 160}},
        {"id": "index", "type": "embed", "model": EMBED, "depends_on": ["keyframes"],
         "payload": {"index": "talks", "documents": [
             {"text": "volcano eruption seen in the colour bars section", "source": "in/talk.mp4",
              "locator": "00:00:02"},
             {"text": "the budget of the volcano observatory", "source": "docs/report.pdf",
              "locator": 4},
         ]}},
        # an untrusted task adds to the index (marked so); its snippet is hostile markup
        {"id": "scraped", "type": "embed", "model": EMBED, "depends_on": ["index"],
         "trust": "untrusted",
         "payload": {"index": "talks", "documents": [
             {"text": HOSTILE, "source": "web/<i>page</i>.html", "locator": "a <b>spot</b>"}]}},
    ]}  # fmt: skip
    try:
        cluster.start_brain()
        cluster.start_worker("w0", "script,cpu")
        submitted = cluster.submit(plan)
        view = cluster.wait_plan(submitted["id"], 90)
        assert view["status"] == "succeeded", [(t["id"], t["error"]) for t in view["tasks"]]
        with chromium() as driver:
            page = Dashboard(driver, cluster.url)
            page.open()
            page.sign_in(ADMIN_TOKEN)
            page.go("search")
            page.wait(lambda _: page.texts('[data-search="index"] option[value="talks"]'),
                      what="the index list")  # fmt: skip
            page.type_into('[data-search="query"]', "volcano eruption")
            page.click('[data-search="form"] button[type=submit]')
            page.wait(lambda _: len(page.texts("[data-hit]")) == 3, what="three hits")
            hits = page.driver.execute_script("""
                return [...document.querySelectorAll('[data-hit]')].map(e => ({
                  source: e.querySelector('[data-field=source]').textContent,
                  where: (e.querySelector('[data-field=where]') || {}).textContent || null,
                  snippet: e.querySelector('[data-field=snippet]').textContent,
                  untrusted: !!e.querySelector('[data-untrusted]'),
                  hit: e.dataset.hit}))""")
            by_source = {hit["source"]: hit for hit in hits}
            video = by_source["in/talk.mp4"]
            assert video["where"] == "at 00:00:02" and not video["untrusted"]
            assert by_source["docs/report.pdf"]["where"] == "page 4"
            hostile = by_source["web/<i>page</i>.html"]
            assert hostile["untrusted"] and hostile["snippet"] == HOSTILE
            assert hostile["where"] == "a <b>spot</b>"
            # the video hit's keyframe: decoded from the data: URL the brain's bytes made
            selector = f'[data-hit="{video["hit"]}"] img[data-keyframe]'
            page.wait(lambda d: d.execute_script(
                "const i = document.querySelector(arguments[0]);"
                "return !!i && i.complete && i.naturalWidth === 160", selector),
                what="the keyframe")  # fmt: skip
            assert page.attrs(selector, "src")[0].startswith("data:image/png;base64,")
            assert page.texts("[data-hit] img:not([data-keyframe])") == []
            # hostile text stayed text: no element it spelled, no script it held ran
            assert page.driver.execute_script("return window.__pwned") is None
            assert page.texts("[data-search=results] script, [data-search=results] b, "
                              "[data-search=results] i") == []  # fmt: skip
            assert page.text("[data-untrusted]") == "[untrusted]"
            page.screenshot("dashboard-search.png")
            # a search the brain refuses says why, in the page
            page.select('[data-search="index"]', "")
            page.clear('[data-search="query"]')
            page.type_into('[data-search="query"]', "x" * 10)
            ollama.stop()  # the brain cannot embed the query: a 503 with the reason
            page.click('[data-search="form"] button[type=submit]')
            error = page.wait_css('[data-search="error"]')
            assert "HTTP 503" in error and "unreachable" in error
            # the only line the browser logged: that refused request itself
            assert all("/v1/search" in line for line in page.console_errors())
    finally:
        cluster.stop()
        ollama.stop()
