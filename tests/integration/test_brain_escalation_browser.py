"""The dashboard's External page in a real headless Chromium: the spend against the
budget, a task waiting over budget with its reason, and the calls made."""

from __future__ import annotations

import pytest
from brain_procs import ADMIN_TOKEN, Cluster, wait_until
from dashboard_browser import Dashboard, browser_missing, chromium
from fake_gateway import FakeGateway

pytestmark = pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "")
TOKEN = "browser-gateway-token"


def test_the_external_page_shows_spend_waiting_tasks_and_calls(tmp_path):
    gateway = FakeGateway(TOKEN).start()
    gateway.usage = (1_000_000, 0)  # one call costs 3.0 at the default price
    cluster = Cluster(tmp_path, brain_env={
        "AIRIG_ESCALATION": "on", "AIRIG_GATEWAY_URL": gateway.url,
        "AIRIG_GATEWAY_TOKEN": TOKEN, "AIRIG_ESCALATION_BUDGET_DAILY": "2",
    })  # fmt: skip
    try:
        cluster.start_brain()
        first = cluster.submit({"name": "one", "tasks": [
            {"id": "x", "type": "noop", "escalate": "always"}]})  # fmt: skip
        assert cluster.wait_plan(first["id"], 20)["status"] == "succeeded"
        cluster.submit({"name": "two", "tasks": [
            {"id": "y", "type": "noop", "escalate": "always"}]})  # fmt: skip
        wait_until(lambda: cluster.get("/v1/escalations")["waiting"], 15, "a waiting task")
        with chromium() as driver:
            page = Dashboard(driver, cluster.url)
            page.open()
            page.sign_in(ADMIN_TOKEN)
            page.go("escalations")
            waiting = page.wait_css('tr[data-escalated="y"]')
            assert "over daily budget" in waiting and "over_budget" in waiting
            assert page.text("#badge-escalations") == "1"
            assert "3.0000 / 2.0000" in (page.text(".tile.tile-bad") or "")
            assert page.text('[data-tile="calls"] .tile-value') == "1"  # the one made
            [call] = [t for t in page.texts("tr[data-call]") if "answered" in t]
            assert "fake/fake-1" in call and "1000000" in call
            page.screenshot("dashboard-external.png")
            assert page.console_errors() == []
    finally:
        cluster.stop()
        gateway.stop()
