"""AIRIG_IMAGE_REGISTRY and the pull before `up` starts anything: which reference the
kit pulls from a mirror, which images Compose pulls, and the one line a failed pull is.

The daemon texts below are what Docker 20.10 printed against Debian's docker-registry
(Distribution 2.8) on 127.0.0.1 (tests/images/registry.sh); tests/e2e/test_kit_pull.py
runs the same failures for real.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from airig.common.errors import ConfigError, DockerError
from airig.launcher.compose.docker import compose_pulls
from airig.launcher.compose.plan import ComposePlan, StackPlan
from airig.launcher.compose.pull import pull_error, pull_missing
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.images import choose_images, load_catalog
from airig.launcher.images.registry import mirrored, split_domain
from airig.launcher.settings import load_settings

ROOT = Path(__file__).resolve().parents[3]
CATALOG = load_catalog(ROOT)
MIRROR = "127.0.0.1:5000"
MANIFEST_UNKNOWN = (
    "pulling ollama failed: Error response from daemon: manifest for "
    "127.0.0.1:5000/ollama/ollama:0.0.0 not found: manifest unknown: manifest unknown"
)
REFUSED = (
    'pulling ollama failed: Error response from daemon: Get "http://127.0.0.1:1/v2/": '
    "dial tcp 127.0.0.1:1: connect: connection refused"
)


# ------------------------------------------------------------------ the reference
@pytest.mark.parametrize(
    ("image", "domain", "path"),
    [
        ("ollama/ollama:0.20.6", "docker.io", "ollama/ollama:0.20.6"),
        ("yanwk/comfyui-boot:cpu", "docker.io", "yanwk/comfyui-boot:cpu"),
        ("ghcr.io/speaches-ai/speaches:0.8.3-cpu", "ghcr.io", "speaches-ai/speaches:0.8.3-cpu"),
        ("ubuntu:24.04", "docker.io", "library/ubuntu:24.04"),
        ("docker.io/ubuntu:24.04", "docker.io", "library/ubuntu:24.04"),
        ("index.docker.io/ollama/ollama:1", "docker.io", "ollama/ollama:1"),
        ("localhost/x/y:1", "localhost", "x/y:1"),
        ("localhost:5000/y:1", "localhost:5000", "y:1"),
        ("Registry/y:1", "Registry", "y:1"),  # uppercase: never a Docker Hub namespace
        ("ubuntu@sha256:" + "a" * 64, "docker.io", "library/ubuntu@sha256:" + "a" * 64),
    ],
)
def test_the_registry_part_is_split_as_docker_splits_it(image, domain, path) -> None:
    assert split_domain(image) == (domain, path)


def test_a_mirror_keeps_path_tag_and_digest_and_replaces_the_host() -> None:
    assert mirrored("ollama/ollama:0.20.6", MIRROR) == f"{MIRROR}/ollama/ollama:0.20.6"
    speaches = "ghcr.io/speaches-ai/speaches:0.8.3-cpu"
    assert (
        mirrored(speaches, "harbor.lan/proxy/") == "harbor.lan/proxy/speaches-ai/speaches:0.8.3-cpu"
    )
    pinned = "ollama/ollama@sha256:" + "b" * 64
    assert mirrored(pinned, MIRROR) == f"{MIRROR}/{pinned}"
    assert mirrored(f"{MIRROR}/ollama/ollama:1", MIRROR) == f"{MIRROR}/ollama/ollama:1"
    assert mirrored("ollama/ollama:0.20.6", "") == "ollama/ollama:0.20.6"


def test_every_image_compose_reads_comes_from_the_mirror_and_the_choice_is_unchanged() -> None:
    plain = choose_images(CATALOG, "cpu", [], {})
    through = choose_images(CATALOG, "cpu", [], {}, registry=MIRROR)
    assert [c.image for c in through.choices] == [
        f"{MIRROR}/{split_domain(c.image)[1]}" for c in plain.choices
    ]
    assert {c.image for c in through.choices} == {
        f"{MIRROR}/ollama/ollama:0.20.6",
        f"{MIRROR}/yanwk/comfyui-boot:cpu",
        f"{MIRROR}/speaches-ai/speaches:0.8.3-cpu",
    }
    # the variants this profile does not start too: compose interpolates all of them
    assert through.env.keys() == plain.env.keys()
    assert all(value.startswith(f"{MIRROR}/") for value in through.env.values())
    assert [c.why for c in through.choices] == [c.why for c in plain.choices]


def test_a_pin_is_judged_by_its_upstream_name_then_pulled_from_the_mirror() -> None:
    pascal = GpuInfo("nvidia", "NVIDIA GeForce GTX 1060 6GB", "discrete",
                     driver_version="535.183.01", compute_capability="6.1")  # fmt: skip
    fits = {"COMFYUI_IMAGE_NVIDIA": "yanwk/comfyui-boot:cu126-slim"}
    choice = choose_images(CATALOG, "gpu-nvidia", [pascal], fits, registry=MIRROR).of("comfyui")
    assert choice.image == f"{MIRROR}/yanwk/comfyui-boot:cu126-slim"
    assert choice.why == "pinned by COMFYUI_IMAGE_NVIDIA; fits"  # known to the catalogue
    too_new = {"COMFYUI_IMAGE_NVIDIA": "yanwk/comfyui-boot:cu130-slim-v2"}
    refused = choose_images(CATALOG, "gpu-nvidia", [pascal], too_new, registry=MIRROR)
    assert refused.refusals[0].message.startswith(
        "COMFYUI_IMAGE_NVIDIA=yanwk/comfyui-boot:cu130-slim-v2 cannot run on"
    )


# ------------------------------------------------------------------ the setting
def test_the_setting_takes_host_port_and_path(launcher_kit: Path) -> None:
    for value in ("127.0.0.1:5000", "registry.lan/dockerhub/", "mirror.example.org"):
        (launcher_kit / ".env").write_text(f"AIRIG_IMAGE_REGISTRY={value}\n")
        assert load_settings(launcher_kit).image_registry == value


@pytest.mark.parametrize("value", ["http://127.0.0.1:5000", "127.0.0.1:5000 x", "a/B"])
def test_a_registry_with_a_scheme_or_a_bad_path_is_one_config_error(launcher_kit, value) -> None:
    (launcher_kit / ".env").write_text(f"AIRIG_IMAGE_REGISTRY={value}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(launcher_kit)
    assert "AIRIG_IMAGE_REGISTRY" in caught.value.message
    assert "host[:port][/path]" in caught.value.hint


# ------------------------------------------------------------------ what compose pulls
def test_compose_pulls_third_party_images_never_the_kits_own() -> None:
    config = {
        "services": {
            "ollama": {"image": f"{MIRROR}/ollama/ollama:0.20.6"},
            "ollama-init": {"image": "airig/airig:0.1.0", "pull_policy": "never"},
            "brain": {"image": "airig/airig:0.1.0", "build": {"context": "."}},
            "comfyui-cpu": {"image": f"{MIRROR}/yanwk/comfyui-boot:cpu"},
            "comfyui-twin": {"image": f"{MIRROR}/yanwk/comfyui-boot:cpu"},
            "built-later": {"image": "x/y:1", "pull_policy": "build"},
            "no-image": {"build": {"context": "."}},
        }
    }
    assert compose_pulls(config) == {
        f"{MIRROR}/ollama/ollama:0.20.6": "ollama",
        f"{MIRROR}/yanwk/comfyui-boot:cpu": "comfyui-cpu",
    }


# ------------------------------------------------------------------ a failed pull
def test_a_missing_tag_names_the_image_and_the_fix() -> None:
    error = pull_error(f"{MIRROR}/ollama/ollama:0.0.0", "ollama", MANIFEST_UNKNOWN,
                       "OLLAMA_IMAGE", MIRROR)  # fmt: skip
    assert error.message == (
        f"cannot pull {MIRROR}/ollama/ollama:0.0.0: no such tag in {MIRROR} (manifest unknown)"
    )
    assert error.hint.startswith(f"push ollama/ollama:0.0.0 to {MIRROR}, or pin a tag")
    assert "OLLAMA_IMAGE in .env" in error.hint


def test_an_unreachable_registry_names_the_image_and_the_fix() -> None:
    error = pull_error("127.0.0.1:1/ollama/ollama:0.20.6", "ollama", REFUSED, "OLLAMA_IMAGE",
                       "127.0.0.1:1")  # fmt: skip
    assert error.message == (
        "cannot pull 127.0.0.1:1/ollama/ollama:0.20.6: the registry 127.0.0.1:1 is "
        "unreachable (connection refused)"
    )
    assert "AIRIG_IMAGE_REGISTRY" in error.hint
    lookup = "lookup registry-1.docker.io: no such host"
    offline = pull_error("ollama/ollama:0.20.6", "ollama", lookup, "OLLAMA_IMAGE", "")
    assert "(no such host)" in offline.message and "docker.io" in offline.message
    assert "AIRIG_IMAGE_REGISTRY" in offline.hint and "network" in offline.hint


def test_a_refused_or_plain_http_registry_says_what_to_do() -> None:
    denied = pull_error(
        "nobody/here:1", "ollama",
        "pull access denied for nobody/here, repository does not exist or may require "
        "'docker login': denied: requested access to the resource is denied", "", "",
    )  # fmt: skip
    assert "refused it" in denied.message and "docker login docker.io" in denied.hint
    http = pull_error(
        "mirror.lan:5000/ollama/ollama:1", "ollama",
        'Get "https://mirror.lan:5000/v2/": http: server gave HTTP response to HTTPS client',
        "OLLAMA_IMAGE", "mirror.lan:5000",
    )  # fmt: skip
    assert "plain HTTP" in http.message and "insecure-registries" in http.hint


class Engine:
    """The two adapter calls pull_missing makes; ``fail`` maps a service to its failure."""

    def __init__(self, missing: dict[str, list[tuple[str, str]]], fail: dict[str, str]) -> None:
        self.missing, self.fail, self.pulled = missing, fail, []

    def images_to_pull(self, stack):
        return self.missing.get(stack.name, [])

    def pull_service(self, stack, service):
        yield f" {service} Pulling"
        if service in self.fail:
            raise DockerError(self.fail[service], "see the lines above, or run doctor")
        self.pulled.append(service)
        yield f" {service} Pulled"


def plan_of(*names: str) -> ComposePlan:
    stacks = tuple(StackPlan(name, f"p-{name}", (), (), (), 60) for name in names)
    return ComposePlan("cpu", "ai-network", stacks)


def test_pull_goes_one_image_at_a_time_and_stops_at_the_first_failure() -> None:
    images = choose_images(CATALOG, "cpu", [], {}, registry=MIRROR)
    ollama = images.of("ollama").image
    comfy = images.of("comfyui").image
    engine = Engine({"02-compute": [("comfyui-cpu", comfy), ("ollama", ollama), ("w", "x:1")]},
                    {"ollama": MANIFEST_UNKNOWN})  # fmt: skip
    out = io.StringIO()
    with pytest.raises(DockerError) as caught:
        pull_missing(engine, plan_of("01-infra", "02-compute"), images, MIRROR,
                     Console(file=out, width=300))  # fmt: skip
    assert engine.pulled == ["comfyui-cpu"]  # whisper is never tried
    assert caught.value.message.startswith(f"cannot pull {ollama}: no such tag")
    assert "OLLAMA_IMAGE in .env" in caught.value.hint
    assert f"Pulling {comfy} (comfyui-cpu)" in out.getvalue()
    assert f"pulled {comfy}" in out.getvalue()


def test_nothing_missing_pulls_nothing_and_says_nothing() -> None:
    out = io.StringIO()
    pulled = pull_missing(Engine({}, {}), plan_of("01-infra", "02-compute", "03-agents"),
                          None, "", Console(file=out))  # fmt: skip
    assert pulled == [] and out.getvalue() == ""
