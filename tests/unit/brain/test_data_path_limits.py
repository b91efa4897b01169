"""Every limit on a path inside the data volume is a one-line 422, never a 500 (issue 23
§6: a goal's ``inputs_dir`` of over 255 characters was an OSError)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from airig.common.task_schemas import NAME_MAX, TranscribePayload, relative_data_path

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store


@pytest.mark.parametrize(
    "value",
    ["a" * (NAME_MAX + 1), "talks/" + "b" * (NAME_MAX + 1), "é" * 128, "x/" * 10 + "y" * 256],
)
def test_a_name_over_the_file_systems_limit_is_refused(value):
    with pytest.raises(ValueError, match="longer than 255 bytes"):
        relative_data_path(value)


def test_names_at_the_limit_are_accepted():
    assert relative_data_path("a" * NAME_MAX) == "a" * NAME_MAX
    assert relative_data_path("é" * 127) == "é" * 127  # 254 bytes


def test_a_payload_path_past_each_limit_is_a_validation_error():
    for audio in ("c" * 256, "d/" * 600):  # one name; the whole path (1024 characters)
        with pytest.raises(ValidationError):
            TranscribePayload(audio=audio, model="Systran/faster-whisper-tiny")


def test_the_goal_route_answers_422_for_every_path_length_limit(tmp_path):
    from fastapi.testclient import TestClient

    from airig.brain.api.app import create_app
    from tests.unit.brain_helpers import make_settings

    (tmp_path / "data").mkdir()
    settings = make_settings(tmp_path, BRAIN_DATA_DIR=str(tmp_path / "data"))
    admin = {"Authorization": "Bearer admin-secret-token"}
    with TestClient(create_app(settings)) as client:
        for inputs_dir in ("a" * 256, "a/" * 100 + "b" * 300, "c" * 1025, "d/" * 513):
            answer = client.post(
                "/v1/goals", headers=admin, json={"goal": "g", "inputs_dir": inputs_dir}
            )
            assert answer.status_code == 422, (len(inputs_dir), answer.text)
