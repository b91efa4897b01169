"""The dashboard's Report page (issue 40 §2): its script, its nav entry, and plotly.min.js
served from the installed plotly package (never from this repository or a CDN); a brain
without the package says what to install in one line."""

from __future__ import annotations

import importlib.util

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.api.routes import dashboard as routes_dashboard

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

REPO_JS = {p.name for p in routes_dashboard.STATIC.iterdir()}


@pytest.fixture
def client(tmp_path):
    brain = h.make_brain(tmp_path)
    with TestClient(create_app(brain.settings)) as made:
        yield made
    brain.stop()


def test_the_library_is_the_installed_packages_file(client):
    answer = client.get("/dashboard/plotly.min.js")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/javascript")
    spec = importlib.util.find_spec("plotly")
    assert spec is not None and spec.submodule_search_locations
    assert routes_dashboard.charting_library().is_relative_to(spec.submodule_search_locations[0])
    assert answer.content == routes_dashboard.charting_library().read_bytes()
    assert b"plotly.js" in answer.content[:400]  # its banner: the library, whole
    assert "plotly.min.js" not in REPO_JS  # never copied into the repository


def test_the_page_keeps_its_policy_with_the_library(client):
    policy = client.get("/dashboard/plotly.min.js").headers["content-security-policy"]
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert "script-src 'self';" in policy
    assert routes_dashboard.EMPTY_STYLE in policy  # an empty <style> only, filled by CSSOM
    page = client.get("/dashboard").text
    assert '<script src="/dashboard/report.js" defer></script>' in page
    assert 'data-nav="report"' in page
    script = client.get("/dashboard/report.js")
    assert script.status_code == 200 and "window.AirigReport" in script.text
    assert "https://" not in script.text and "cdn" not in script.text.lower()


def test_a_brain_without_plotly_says_what_to_install(client, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    answer = client.get("/dashboard/plotly.min.js")
    assert answer.status_code == 404
    detail = answer.json()["detail"]
    assert "\n" not in detail and "install the plotly package" in detail
