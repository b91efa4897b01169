"""The dashboard's Report page in a real headless Chromium (issue 40 §2): a brain whose store
holds three days of history (tests/unit/brain/test_report.py's plans: runs, a failure, a
retry, model loads, an escalation, alerts, a model named with markup) serves the page and
plotly.min.js from the installed plotly package; the page's plots are drawn by that
library (window.Plotly) with the report's numbers in their SVG, and the hostile model name
is text in the legend and the table, never markup."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from brain_procs import ADMIN_TOKEN, Cluster
from dashboard_browser import Dashboard, browser_missing, chromium

UNIT = Path(__file__).resolve().parents[1] / "unit"
sys.path[:0] = [str(UNIT), str(UNIT / "brain")]
import brain_helpers as h  # noqa: E402
import test_report as history  # noqa: E402

pytestmark = pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "")
DAY = 86_400.0


def test_the_report_page_plots_the_history_with_the_served_library(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRIG_TEST_STORE", raising=False)  # the brain process reads a file
    root = tmp_path / "cluster"
    base = (time.time() // DAY - 2) * DAY
    made = h.make_brain(root)  # the same BRAIN_DB and results folder the Cluster's brain uses
    history.history(made, base)
    made.stop()
    cluster = Cluster(root, brain_env={"AIRIG_RETENTION_DAYS": "0"})
    try:
        cluster.start_brain()
        library = requests.get(f"{cluster.url}/dashboard/plotly.min.js", timeout=30)
        assert library.status_code == 200 and len(library.content) > 1_000_000
        assert library.headers["content-type"].startswith("text/javascript")
        with chromium() as driver:
            page = Dashboard(driver, cluster.url)
            page.open()
            page.sign_in(ADMIN_TOKEN)
            assert not driver.execute_script("return !!window.Plotly")  # loaded by #report only
            page.go("report")
            page.wait(lambda d: d.execute_script(
                "return !!window.Plotly"
                " && document.querySelectorAll('[data-plot] .main-svg').length >= 4"
            ), what="the plots")  # fmt: skip
            figures = driver.execute_script("""
                const out = {};
                for (const slot of document.querySelectorAll('[data-plot]')) {
                  out[slot.dataset.plot] = {
                    traces: (slot.data || []).map((t) => ({ name: t.name, x: t.x, y: t.y })),
                    bars: [...slot.querySelectorAll('.barlayer .point path')]
                      .filter((p) => (p.getAttribute('d') || '').length > 4).length,
                    points: slot.querySelectorAll('.scatterlayer .point').length,
                    legend: [...slot.querySelectorAll('.legendtext')].map((e) => e.textContent),
                    svg: !!slot.querySelector('svg.main-svg'),
                  };
                }
                return out;""")
            tasks = figures["tasks"]
            done, failed = (next(dict(zip(t["x"], t["y"], strict=True)) for t in tasks["traces"]
                                 if t["name"] == name) for name in ("done", "failed"))  # fmt: skip
            day0, day1 = (datetime.fromtimestamp(base + n * DAY, UTC).strftime("%Y-%m-%d")
                          for n in (0, 1))  # fmt: skip
            assert (done[day0], done[day1], failed[day0], failed[day1]) == (3, 1, 1, 0), tasks
            assert sum(done.values()) == 4 and len(done) in (7, 8)
            assert tasks["bars"] >= 3  # done day 0 and day 1, failed day 0: drawn bars
            hostile = history.HOSTILE
            runtime = figures["runtime"]
            assert f"{'noop · ' + hostile} p50" in runtime["legend"], runtime["legend"]
            assert runtime["points"] >= 2
            assert figures["loads"]["bars"] >= 1 and "qwen2.5:7b" in figures["loads"]["legend"]
            assert figures["escalations"]["bars"] >= 1
            assert "service_down" in figures["alerts"]["legend"]
            models = page.texts('[data-report="table"] [data-field="model"]')
            assert hostile in models
            assert not driver.execute_script(
                "return document.querySelectorAll("
                "'#view script, #view a[href^=\"javascript\"]').length"
            )  # fmt: skip
            # plotly.min.js carries maplibre's CSS for map traces (unused here) and writes it
            # into a <style> element as it loads: the page's CSP refuses it, as it should.
            # Any other refusal or error fails the test.
            errors = page.console_errors()
            refused = [e for e in errors if "plotly.min.js" in e and "Applying inline style" in e]
            assert len(refused) <= 1 and [e for e in errors if e not in refused] == [], errors
            urls = [url for url in page.requested_urls() if "://" in url]  # not paint entries
            assert all(url.startswith(cluster.url) for url in urls), urls
            assert f"{cluster.url}/dashboard/plotly.min.js" in urls
            page.screenshot("dashboard-report.png")
            # weeks: one bucket holds all of it
            page.select('[data-report="by"]', "week")
            page.wait(lambda d: d.execute_script(
                "const s = document.querySelector('[data-plot=tasks]');"
                "return !!s && !!s.data && s.data[0].y.reduce((a, b) => a + b, 0) === 4"
                " && s.data[0].x.every((x) => /W\\d\\d$/.test(x))"
            ), what="the weekly plot")  # fmt: skip
    finally:
        cluster.stop()
