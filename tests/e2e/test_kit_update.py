"""Locked images and `update`, against the real registry on 127.0.0.1 (tests/images/registry.sh).

One kit for every step (each `up` costs a minute): the Whisper image is pinned to a tag of
this test's own (``speaches:e2e-update``), so the shared tags the other e2e tests pull never
move. v1 = the stand-in; v2 = the stand-in with another LABEL; v3 = the stand-in whose CMD
exits. `up` locks v1; v2 pushed under the same tag: `up` still starts v1, `update --check`
sees v2, `update` moves to it; v3: `update` rolls back to v2 and the kit stays healthy.
An unknown service, a tag that vanished and a registry that is down: one line each, exit ≠ 0,
nothing changed.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest
from e2e_lanes import lane_for
from support import one_error

pytestmark = pytest.mark.docker

BASE = "airig-test/whisper:test"
TAG = "speaches-ai/speaches:e2e-update"
LANE = lane_for(__file__)
CONTAINER = LANE.container("compute", "whisper-cpu")
ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])  # fmt: skip


def docker(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=300, input=stdin
    )
    assert done.returncode == 0, f"docker {args}: {done.stdout}{done.stderr}"
    return done.stdout


def push(mirror: str, dockerfile: str | None) -> str:
    """The stand-in (or an image built FROM it) pushed as ``mirror/TAG``, untagged here so
    every pull goes through the registry; returns the digest the registry now names."""
    image = BASE
    if dockerfile is not None:
        image = "airig-test/whisper:e2e-update-build"
        docker("build", "-q", "-t", image, "-", stdin=dockerfile)
    ref = f"{mirror}/{TAG}"
    docker("tag", image, ref)
    docker("push", "-q", ref)
    docker("rmi", ref)
    return registry_digest(mirror)


def registry_digest(mirror: str) -> str:
    repo, tag = TAG.split(":")
    request = urllib.request.Request(
        f"http://{mirror}/v2/{repo}/manifests/{tag}", method="HEAD", headers={"Accept": ACCEPT}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.headers["Docker-Content-Digest"])


def delete_tag(mirror: str, digest: str) -> None:
    repo = TAG.split(":")[0]
    request = urllib.request.Request(
        f"http://{mirror}/v2/{repo}/manifests/{digest}", method="DELETE"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 202


def locked(kit) -> dict:
    return json.loads((kit.root / ".airig" / "images.lock").read_text())["images"]


def running_label() -> str:
    return docker("inspect", "-f", '{{index .Config.Labels "airig.e2e"}}', CONTAINER).strip()


def log(kit) -> list[dict]:
    text = (kit.root / ".airig" / "update.log").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_up_locks_update_moves_and_a_failing_image_rolls_back(kit):
    from conftest import write_test_env

    mirror = kit.env()["AIRIG_IMAGE_REGISTRY"]
    overrides = {
        "WHISPER_IMAGE_CPU": f"ghcr.io/{TAG}",
        "AIRIG_OLLAMA_MODELS": "qwen2.5:0.5b",
        "AIRIG_WHISPER_MODELS": "Systran/faster-whisper-tiny",
    }
    write_test_env(kit.root, **overrides)
    v1 = push(mirror, None)

    # up locks what it started
    done = kit.run(timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    entry = locked(kit)["WHISPER_IMAGE_CPU"]
    assert (entry["tag"], entry["digest"]) == (f"{mirror}/{TAG}", v1)
    assert "WHISPER_IMAGE_CPU in .env" in entry["why"]  # the pin chose it
    assert {"OLLAMA_IMAGE", "COMFYUI_IMAGE_CPU"} <= set(locked(kit))
    shown = {
        row["service"]: row for row in json.loads(kit.run("status", "--json").stdout)["images"]
    }
    assert shown["whisper"]["digest"] == v1.removeprefix("sha256:")[:12]

    # v2 under the same tag: a later up still starts v1; --check sees v2; update moves to it
    v2 = push(mirror, f"FROM {BASE}\nLABEL airig.e2e=v2\n")
    assert v2 != v1
    dry = kit.run("--dry-run", timeout=120)
    assert f"{mirror}/speaches-ai/speaches@{v1}" in dry.stdout, dry.stdout
    check = kit.run("update", "--check", timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    line = next(ln for ln in check.stdout.splitlines() if "whisper" in ln)
    assert "moved upstream" in line and v2.removeprefix("sha256:")[:12] in line, check.stdout
    assert "ollama" in check.stdout and "is current" in check.stdout
    assert locked(kit)["WHISPER_IMAGE_CPU"]["digest"] == v1  # --check changes nothing

    done = kit.run("update", "whisper", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "whisper: now" in done.stdout and "smoke check passed" in done.stdout
    assert locked(kit)["WHISPER_IMAGE_CPU"]["digest"] == v2
    assert running_label() == "v2"
    assert log(kit)[-1] | {"time": ""} == {
        "time": "", "action": "update", "service": "whisper", "variable": "WHISPER_IMAGE_CPU",
        "from": {"tag": f"{mirror}/{TAG}", "digest": v1},
        "to": {"tag": f"{mirror}/{TAG}", "digest": v2}, "ok": True, "reason": "",
    }  # fmt: skip

    # v3 exits at start: update (every service) rolls whisper back to v2, healthy
    v3 = push(
        mirror, f'FROM {BASE}\nLABEL airig.e2e=v3\nCMD ["python3", "-c", "raise SystemExit(3)"]\n'
    )
    failed = kit.run("update", timeout=300)
    # the code the engine reports varies with when the failure is seen (3 from the new
    # container, 0 once the engine has stopped it): that it exited is the finding
    line = one_error(failed.returncode, failed.stderr, "whisper", "exited (code")
    assert f"rolled back to {v2.removeprefix('sha256:')[:12]}" in line
    assert locked(kit)["WHISPER_IMAGE_CPU"]["digest"] == v2
    assert running_label() == "v2"
    assert [e["action"] for e in log(kit)[-2:]] == ["update", "rollback"]
    assert log(kit)[-1]["to"]["digest"] == v2 and log(kit)[-1]["ok"] is True
    assert all(s["health"] in ("healthy", "") for s in kit.status() if s["state"] == "running")

    # bad input: one line, exit ≠ 0, nothing changed
    before = ((kit.root / ".airig" / "images.lock").read_text(), len(log(kit)))
    host_env = (kit.root / ".airig" / "host.env").read_text()
    unknown = kit.run("update", "nope", timeout=120)
    one_error(
        unknown.returncode, unknown.stderr, "unknown service 'nope'", "comfyui, ollama, whisper"
    )

    delete_tag(mirror, v3)  # the tag vanished upstream
    gone = kit.run("update", "--check", timeout=120)
    one_error(gone.returncode, gone.stderr, f"{mirror}/{TAG}", "no such tag")

    write_test_env(kit.root, **overrides, AIRIG_IMAGE_REGISTRY="127.0.0.1:9")  # nothing listens
    down = kit.run("update", "whisper", timeout=120)
    one_error(down.returncode, down.stderr, "127.0.0.1:9", "unreachable")
    after = ((kit.root / ".airig" / "images.lock").read_text(), len(log(kit)))
    assert after == before and (kit.root / ".airig" / "host.env").read_text() == host_env
    assert running_label() == "v2"
