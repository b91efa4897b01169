"""A fan-out on the dashboard, in a real headless Chromium against a real brain and worker
(issue 25 §1): the group is one row with its items' progress (never one row per item
task), it opens to list the items, a failed item shows its error, and the plan ends
partial."""

from __future__ import annotations

import pytest
from brain_procs import ADMIN_TOKEN, Cluster
from dashboard_browser import Dashboard, browser_missing, chromium

pytestmark = pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "")

# Three files; the item "bad.txt" fails its check (a shell test, the item as a variable).
PLAN = {"name": "a folder", "tasks": [
    {"id": "files", "for_each": {"items": ["one.txt", "bad.txt", "three.txt"]},
     "tasks": [
         {"id": "read", "type": "noop", "payload": {"echo": "{{ item.path }}"}},
         {"id": "check", "type": "shell", "depends_on": ["read"], "retry_count": 0,
          "payload": {"command": "test {{ item.stem }} != bad"}},
     ]},
]}  # fmt: skip


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.start_brain()
    cluster.start_worker("cpu-1", classes="cpu")
    yield cluster
    cluster.stop()


def test_a_fan_out_is_one_row_with_its_items_progress(cluster):
    submitted = cluster.submit(PLAN)
    assert submitted["task_total"] == 7  # the group and 2 tasks for each of 3 items
    with chromium() as driver:
        page = Dashboard(driver, cluster.url)
        page.open()
        page.sign_in(ADMIN_TOKEN)
        page.go("plans")
        page.click(f'tr[data-plan="{submitted["id"]}"]')
        page.wait_css('[data-plan-status="partial"]', timeout=60)
        # one row for the group, none for its six item tasks
        assert page.attrs("[data-task-row]", "data-task-row") == ["files"]
        progress = page.text('[data-fanout-progress="files"]') or ""
        assert progress == "2 done / 0 running / 1 failed of 3", progress
        page.click('[data-fanout-progress="files"]')
        page.wait(lambda _: len(page.texts('[data-fanout="files"] [data-item]')) == 3,
                  what="the group's items listed")  # fmt: skip
        labels = page.texts('[data-fanout="files"] [data-item] .mono')
        assert labels == ["#0 one.txt", "#1 bad.txt", "#2 three.txt"], labels
        failed = page.text('[data-fanout="files"] [data-item="1"]') or ""
        assert failed.lower().startswith("failed") and "exited with code 1" in failed, failed
        # the group ended with a failed item: its row and its node in the graph are
        # PARTIAL (amber), not SUCCEEDED (green)
        assert page.text('[data-task-row="files"] .pill') == "PARTIAL"
        node = '[data-task="files"]'
        assert page.attrs(node, "class") == ["node st-PARTIAL"], page.attrs(node, "class")
        assert page.attrs(node, "data-state") == ["PARTIAL"]
        page.screenshot("dashboard-fanout.png")
        assert page.console_errors() == []
