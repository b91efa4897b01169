"""``GET /v1/alerts``: what the brain has fired and not cleared, the rows /metrics shows as
``airig_alert_active``, read by an admin or a metrics token (what `triage` reads)."""

from __future__ import annotations

import brain_helpers as h
import pytest
import requests
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.ops.probes import ServiceProbes, Target

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}


def refused(url: str, timeout_s: float) -> str:
    raise requests.ConnectionError("refused")


def test_active_alerts_are_listed_until_they_clear(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path))) as client:
        brain = client.app.state.brain
        assert client.get("/v1/alerts", headers=ADMIN).json() == {"alerts": []}
        brain.probes = ServiceProbes(
            (Target("whisper", "http://whisper:8000", False),), down_after=1, get=refused
        )
        brain.probes.probe_once()
        brain.check_alerts(now=1000.0)
        [alert] = client.get("/v1/alerts", headers=ADMIN).json()["alerts"]
        assert (alert["kind"], alert["subject"], alert["fired_at"]) == (
            "service_down", "whisper", 1000.0,
        )  # fmt: skip
        assert "run `python start_services.py triage whisper`" in alert["message"]
        metrics = client.get("/metrics", headers=ADMIN).text
        assert 'airig_alert_active{alert="service_down",subject="whisper"} 1.0' in metrics
        brain.probes._get = lambda url, timeout_s: "OK"
        brain.probes.probe_once()
        brain.check_alerts(now=1001.0)
        assert client.get("/v1/alerts", headers=ADMIN).json() == {"alerts": []}


def test_alerts_are_read_by_an_admin_or_a_metrics_token_only(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path))) as client:
        assert client.get("/v1/alerts").status_code == 401
        for scope, status in (("metrics", 200), ("submit", 403)):
            token = client.post("/v1/tokens", headers=ADMIN, json={"scope": scope}).json()
            answer = client.get("/v1/alerts", headers={"Authorization": f"Bearer {token['token']}"})
            assert answer.status_code == status, scope
