"""ComfyUI's volumes: upstream's mount points, an init, the one-time move of an older
kit's /root volume, and a fresh /root for each new image.

yanwk/comfyui-boot copies its bundled ComfyUI into /root/ComfyUI only when main.py is
missing (runner-scripts/entrypoint.sh), so nothing that outlives a container may sit on
/root; upstream's compose files mount models, custom_nodes, input, output and user
(cu130-slim-v2/docker-compose.yml) and set `init: true` (bash is PID 1).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import yaml
from rich.console import Console

from airig.common.errors import DockerError
from airig.launcher.compose.docker import Docker
from airig.launcher.lifecycle import comfy_volumes
from airig.launcher.lifecycle.up import VOLUMES
from airig.provision.comfyui_move import MARKER, TEMP_SUFFIX, move_all, move_tree

ROOT = Path(__file__).resolve().parents[3]
VARIANTS = ("comfyui-cpu", "comfyui-gpu-nvidia", "comfyui-gpu-amd")
UPSTREAM_MOUNTS = {
    "/root/ComfyUI/models",
    "/root/ComfyUI/custom_nodes",
    "/root/ComfyUI/input",
    "/root/ComfyUI/output",
    "/root/ComfyUI/user",
}


def compute() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "02-compute" / "compose.yaml").read_text())


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> volume"""
    pairs = (v.split(":")[:2] for v in service.get("volumes", []))
    return {target: source for source, target in pairs}


# ------------------------------------------------------------------ the compose model
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_comfyui_variant_runs_with_an_init(variant: str) -> None:
    assert compute()["services"][variant].get("init") is True


@pytest.mark.parametrize("variant", VARIANTS)
def test_only_user_files_are_volumes_never_root(variant: str) -> None:
    found = mounts(compute()["services"][variant])
    assert set(found) == UPSTREAM_MOUNTS
    assert not any(t == "/root" or t == "/root/ComfyUI" for t in found)
    assert set(found.values()) == set(comfy_volumes.VOLUMES)


def test_the_init_fills_the_volume_the_server_reads_models_from() -> None:
    model = compute()
    init = model["services"]["comfyui-init"]
    root = Path(init["environment"]["COMFYUI_ROOT"])
    assert mounts(init)[str(root / "models")] == comfy_volumes.MODELS_VOLUME
    assert mounts(model["services"]["comfyui-cpu"])["/root/ComfyUI/models"] == "comfyui-models"
    # the gate reads the verify cache from the same volume
    cache = Path(init["environment"]["AIRIG_VERIFY_CACHE"])
    assert cache.parent == root / "models"
    gate = mounts(model["services"]["models-ready"])
    assert gate["/caches/comfyui"] == f"{comfy_volumes.MODELS_VOLUME}"
    assert (
        "/caches/comfyui/.airig-verified.json"
        in (model["services"]["models-ready"]["environment"]["AIRIG_VERIFY_CACHES"])
    )


def test_compute_volumes_are_external_so_down_volumes_removes_only_anonymous_ones() -> None:
    """The launcher's `down` passes --volumes for 02-compute (the anonymous /root)."""
    volumes = compute()["volumes"]
    assert all(v.get("external") is True for v in volumes.values())


def test_infra_creates_every_comfyui_volume() -> None:
    infra = yaml.safe_load((ROOT / "01-infra" / "compose.yaml").read_text())
    assert set(comfy_volumes.VOLUMES) <= set(infra["volumes"])
    assert comfy_volumes.LEGACY_VOLUME not in infra["volumes"]


def test_down_keep_models_keeps_comfyui_models_and_the_old_volume() -> None:
    assert {"comfyui-models", "comfyui-data"} <= set(VOLUMES["models"])
    assert set(comfy_volumes.USER_VOLUMES) <= set(VOLUMES["data"])
    assert not set(VOLUMES["data"]) & set(VOLUMES["models"])


# ------------------------------------------------------------------ the move (container side)
def old_root(tmp_path: Path) -> Path:
    """An older kit's /root volume: code, models, a workflow, an output, custom nodes."""
    old = tmp_path / "old"
    files = {
        "ComfyUI/main.py": "old code",
        "ComfyUI/models/checkpoints/sd.safetensors": "weights",
        "ComfyUI/models/loras/a.safetensors": "lora",
        "ComfyUI/user/default/workflows/flow.json": "{}",
        "ComfyUI/output/ComfyUI_00001_.png": "png",
        "ComfyUI/custom_nodes/node/__init__.py": "node",
        ".local/lib/x.py": "pip --user",
    }
    for rel, text in files.items():
        (old / rel).parent.mkdir(parents=True, exist_ok=True)
        (old / rel).write_text(text)
    return old


def test_move_takes_user_files_once_and_leaves_the_code(tmp_path: Path) -> None:
    old, new = old_root(tmp_path), tmp_path / "new"
    summary = move_all(old, new)
    assert summary["already"] is False
    assert summary["moved"] == {
        "comfyui-models": 2,
        "comfyui-custom-nodes": 1,
        "comfyui-output": 1,
        "comfyui-user": 1,
    }
    assert (new / "models" / "checkpoints" / "sd.safetensors").read_text() == "weights"
    assert (new / "user" / "default" / "workflows" / "flow.json").read_text() == "{}"
    assert (new / "custom-nodes" / "node" / "__init__.py").read_text() == "node"
    assert (old / "ComfyUI" / "main.py").exists() and (old / ".local").exists()
    assert not (old / "ComfyUI" / "models" / "checkpoints").exists()
    again = move_all(old, new)  # idempotent: the marker answers
    assert again["already"] is True and again["moved"] == summary["moved"]
    assert json.loads((old / MARKER).read_text())["moved"] == summary["moved"]


def test_a_file_already_in_the_new_volume_stays_where_both_are(tmp_path: Path) -> None:
    old, new = old_root(tmp_path), tmp_path / "new"
    (new / "models" / "checkpoints").mkdir(parents=True)
    (new / "models" / "checkpoints" / "sd.safetensors").write_text("newer")
    moved, left = move_tree(old / "ComfyUI" / "models", new / "models")
    assert (moved, left) == (1, 1)
    assert (new / "models" / "checkpoints" / "sd.safetensors").read_text() == "newer"
    assert (old / "ComfyUI" / "models" / "checkpoints" / "sd.safetensors").read_text() == "weights"


def test_a_move_killed_half_way_is_finished_by_the_next(tmp_path: Path) -> None:
    """The copy lands under a hidden temporary name first; the original goes last."""
    old, new = old_root(tmp_path), tmp_path / "new"
    half = new / "models" / "checkpoints" / f".sd.safetensors{TEMP_SUFFIX}"
    half.parent.mkdir(parents=True)
    half.write_text("wei")
    stray = old / "ComfyUI" / "models" / "loras" / f".b.safetensors{TEMP_SUFFIX}"
    stray.write_text("x")
    move_tree(old / "ComfyUI" / "models", new / "models")
    assert (new / "models" / "checkpoints" / "sd.safetensors").read_text() == "weights"
    assert not half.exists() and not stray.exists()


def test_links_are_moved_as_links(tmp_path: Path) -> None:
    old, new = old_root(tmp_path), tmp_path / "new"
    os.symlink("checkpoints", old / "ComfyUI" / "models" / "ckpt")
    move_tree(old / "ComfyUI" / "models", new / "models")
    assert os.readlink(new / "models" / "ckpt") == "checkpoints"


# ------------------------------------------------------------------ the launcher side
class Container:
    def __init__(self, name: str, project: str, service: str = "x", status: str = "exited",
                 image: str = "sha256:old") -> None:  # fmt: skip
        self.name, self.status = name, status
        self.labels = {
            comfy_volumes.PROJECT_LABEL: project,
            comfy_volumes.SERVICE_LABEL: service,
        }
        self.attrs = {"Image": image}
        self.removed: tuple[bool, bool] | None = None

    def remove(self, force: bool = False, v: bool = False) -> None:
        self.removed = (force, v)


class Engine:
    """The docker SDK calls comfy_volumes makes."""

    def __init__(self, containers: list[Container], legacy: bool = True,
                 output: bytes = b'{"already": false, "moved": {}, "left": 0}',
                 images: dict[str, str] | None = None) -> None:  # fmt: skip
        self.listed = containers
        self.legacy, self.output = legacy, output
        self.runs: list[dict[str, Any]] = []
        self.image_ids = images or {}
        self.volumes, self.containers, self.images = self, self, self
        self.gone: list[Container] = []

    def sdk(self) -> Engine:
        return self

    def run_to_end(self, image: str, command: list[str], **options: Any) -> bytes:
        return Docker.run_to_end(self, image, command, **options)  # type: ignore[arg-type]

    def get(self, name: str) -> object:
        if name in self.image_ids:
            return type("Image", (), {"id": self.image_ids[name]})()
        if name.endswith("comfyui-data") and self.legacy:
            return object()
        if name.endswith("comfyui-data"):
            raise docker.errors.NotFound("no such volume")
        raise docker.errors.ImageNotFound("no such image")

    def list(
        self, all: bool = False, filters: dict[str, str] | None = None, ignore_removed: bool = False
    ) -> list[Container]:
        """The SDK's list: one inspect per container, and one in ``gone`` removed before
        its inspect (NotFound, unless ``ignore_removed``)."""
        if self.gone and not ignore_removed:
            raise docker.errors.NotFound(f"No such container: {self.gone[0].name}")
        return self.listed

    def run(self, image: str, command: list[str], **kwargs: Any) -> bytes:
        self.runs.append({"image": image, "command": command, **kwargs})
        return self.output


def test_no_old_volume_no_move(kit_settings: Any) -> None:
    engine = Engine([], legacy=False)
    assert comfy_volumes.move_legacy_volume(kit_settings, engine) is None  # type: ignore[arg-type]
    assert engine.runs == []


def test_the_move_frees_the_old_volume_of_this_rigs_containers_first(kit_settings: Any) -> None:
    ours = Container("airig-compute-comfyui-cpu-1", "airig-compute", "comfyui-cpu", "running")
    out = b'{"already": false, "moved": {"comfyui-models": 3, "comfyui-user": 2}, "left": 1}'
    engine = Engine([ours], output=out)
    line = comfy_volumes.move_legacy_volume(kit_settings, engine)  # type: ignore[arg-type]
    assert ours.removed == (True, True)
    run = engine.runs[0]
    assert run["command"] == ["python", "-m", "airig.provision.comfyui_move"]
    assert run["volumes"]["airig-comfyui-data"]["bind"] == "/old"
    assert run["volumes"]["airig-comfyui-models"]["bind"] == "/new/models"
    assert run["volumes"]["airig-comfyui-custom-nodes"]["bind"] == "/new/custom-nodes"
    assert run["network_mode"] == "none" and run["read_only"] and run["cap_drop"] == ["ALL"]
    assert line is not None
    assert "moved 5 files (3 → airig-comfyui-models, 2 → airig-comfyui-user)" in line
    assert "1 already in the new volumes stayed in airig-comfyui-data" in line
    assert "docker volume rm airig-comfyui-data" in line


def test_a_second_up_says_nothing(kit_settings: Any) -> None:
    engine = Engine([], output=b'{"already": true, "moved": {"comfyui-models": 3}}')
    assert comfy_volumes.move_legacy_volume(kit_settings, engine) is None  # type: ignore[arg-type]


def test_someone_elses_running_container_on_the_old_volume_stops_the_move(
    kit_settings: Any,
) -> None:
    theirs = Container("my-comfy", "other", status="running")
    engine = Engine([theirs])
    with pytest.raises(DockerError) as stopped:
        comfy_volumes.move_legacy_volume(kit_settings, engine)  # type: ignore[arg-type]
    assert "in use by container my-comfy" in stopped.value.message
    assert theirs.removed is None and engine.runs == []


def test_a_comfyui_container_of_another_image_goes_with_its_anonymous_root(
    kit_settings: Any,
) -> None:
    """Most tags declare VOLUME /root, which Compose hands to the replacing container."""
    stale = Container("c1", "airig-compute", "comfyui-cpu", image="sha256:v1")
    current = Container("c2", "airig-compute", "comfyui-gpu-nvidia", image="sha256:v2")
    init = Container("c3", "airig-compute", "comfyui-init", image="sha256:kit")
    engine = Engine([stale, current, init], images={"comfy:v2": "sha256:v2"})
    removed = comfy_volumes.retire_stale_servers(engine, "airig-compute", "comfy:v2")  # type: ignore[arg-type]
    assert removed == ["c1"] and stale.removed == (True, True)
    assert current.removed is None and init.removed is None
    # an image not pulled yet: whatever runs now is another image
    assert comfy_volumes.retire_stale_servers(engine, "airig-compute", "comfy:v3") == ["c1", "c2"]  # type: ignore[arg-type]


def test_a_comfyui_container_gone_since_it_was_listed_fails_no_up(kit_settings: Any) -> None:
    """Listed, then removed before its inspect or before its removal (issue 35 §5): what
    is gone needs no retiring, and `up` goes on."""
    stale = Container("c1", "airig-compute", "comfyui-cpu", image="sha256:v1")
    vanishing = Container("c2", "airig-compute", "comfyui-cpu", image="sha256:v1")

    def already_gone(force: bool = False, v: bool = False) -> None:
        raise docker.errors.NotFound("No such container: c2")

    vanishing.remove = already_gone  # type: ignore[method-assign]
    engine = Engine([stale, vanishing], images={"comfy:v2": "sha256:v2"})
    engine.gone = [Container("c0", "airig-compute", "comfyui-cpu")]
    removed = comfy_volumes.retire_stale_servers(engine, "airig-compute", "comfy:v2")  # type: ignore[arg-type]
    assert removed == ["c1"] and stale.removed == (True, True)


def test_prepare_prints_the_one_line(kit_settings: Any) -> None:
    out = b'{"already": false, "moved": {"comfyui-models": 1}, "left": 0}'
    engine = Engine([], output=out)
    text = io.StringIO()
    stack = type("Stack", (), {"project": "airig-compute"})()
    comfy_volumes.prepare(kit_settings, engine, stack, None, Console(file=text, width=300))  # type: ignore[arg-type]
    said = text.getvalue()
    assert said.count("\n") == 1 and "ComfyUI: moved 1 file (1 → airig-comfyui-models)" in said


@pytest.fixture
def kit_settings(tmp_path: Path) -> Any:
    return type("S", (), {"project_prefix": "airig", "image": "airig/airig:local",
                          "network": "ai-network"})()  # fmt: skip
