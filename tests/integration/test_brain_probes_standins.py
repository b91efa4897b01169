"""The brain's service probes, with their real HTTP getter, against the stand-ins as host
processes: what the real services answer is an answer, never an outage."""

from __future__ import annotations

import requests
from standins import conftest_helpers as helpers

from airig.brain.ops.probes import ServiceProbes, Target

standins = helpers.standins  # the factory fixture, used by name below


def test_whisper_health_is_plain_text_ok_as_speaches_answers_it(standins):
    """speaches v0.8.3 src/speaches/routers/misc.py `health()`: `Response(status_code=200,
    content="OK")`, no media type, so Starlette sends no Content-Type."""
    whisper = standins("whisper")
    answer = requests.get(whisper.url + "/health", timeout=5)
    assert (answer.status_code, answer.text) == (200, "OK")
    assert "Content-Type" not in answer.headers


def test_probes_of_the_standins_raise_nothing(standins):
    whisper, ollama = standins("whisper"), standins("ollama")
    probes = ServiceProbes(
        (Target("whisper", whisper.url, on_gpu=False), Target("ollama", ollama.url, on_gpu=True)),
        down_after=1,
    )
    for _ in range(3):
        probes.probe_once()
    assert probes.holding() == {}
    whisper.stop()
    probes.probe_once()
    [(key, message)] = probes.holding().items()
    assert key == ("service_down", "whisper")
    assert "ConnectionError" in message and "triage whisper" in message
