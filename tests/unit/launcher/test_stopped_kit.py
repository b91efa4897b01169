"""A stopped kit (no .airig/host.env: before the first `up`, after any `down`): `down`,
`down --volumes` and `status` still address it, and `down` leaves nothing `up` generated."""

from __future__ import annotations

import os
import re
from pathlib import Path

from support import write_env

from airig.launcher.compose import plan as plans
from airig.launcher.compose.gpu_workers import GpuSlot, VulkanBuild, gpu_workers_overlay
from airig.launcher.compose.plan import build_plan, plan_for_running, vulkan_compute_overlay
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import STACKS, load_settings

ROOT = Path(__file__).resolve().parents[3]
REQUIRED = re.compile(r"\$\{([A-Z0-9_]+):\?")


def required_variables() -> set[str]:
    """Every ${NAME:?…} in the compose files and in the overlays `up` generates."""
    texts = [p.read_text() for p in ROOT.glob("0*/compose*.yaml")]
    slots = [GpuSlot(0, render_node="/dev/dri/renderD128", gids=(44,))]
    texts += [gpu_workers_overlay(p, slots) for p in ("gpu-nvidia", "gpu-amd")]
    vulkan = VulkanBuild("airig/ollama-vulkan:0.20.6", "ollama/ollama:0.20.6", ())
    texts += [gpu_workers_overlay("gpu-amd", slots, vulkan=vulkan), vulkan_compute_overlay(vulkan)]
    return {name for text in texts for name in REQUIRED.findall(text)}


def assignments(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and line[0] != "#"]
    return dict(line.split("=", 1) for line in lines)


def test_the_placeholders_cover_every_required_variable_the_example_leaves_empty():
    example = assignments(ROOT / ".env.example")
    empty = {name for name in required_variables() if not example.get(name)}
    given = assignments(plans.STOPPED_ENV)
    assert empty == set(given)
    assert "WHISPER_IMAGE_CUDA" in given  # the one the first report named


def test_a_stopped_kit_reads_the_placeholders_after_env_and_a_running_one_does_not(kit):
    write_env(kit)
    settings = load_settings(kit)
    stopped = plan_for_running(settings)
    env_files = (kit / ".env", kit / ".airig" / "host.env", plans.STOPPED_ENV)
    assert all(s.env_files == env_files for s in stopped.stacks)
    Launcher(settings, None, None).write_generated(build_plan(settings, "cpu", []))
    assert plans.STOPPED_ENV not in plan_for_running(settings).stack("02-compute").env_files


class Engine:
    def down(self, stack) -> None: ...

    def remove_volumes(self, names: list[str]) -> list[str]:
        return names

    def remove_network(self, name: str) -> str:
        return f"network {name} removed"


def test_down_removes_the_stack_links_and_empty_folders_and_keeps_the_tuning_log(kit):
    write_env(kit)
    settings = load_settings(kit)
    Launcher(settings, Engine(), None).write_generated(build_plan(settings, "cpu", []))
    assert all((kit / stack / ".env").is_symlink() for stack in STACKS)
    (kit / ".airig" / "tuning.log").write_text('{"id": 1}\n')

    Launcher(settings, Engine(), None).down(plan_for_running(settings), True, False)
    assert [s for s in STACKS if os.path.lexists(kit / s / ".env")] == []
    assert sorted(p.name for p in (kit / ".airig").iterdir()) == ["tuning.log"]

    (kit / ".airig" / "tuning.log").unlink()
    Launcher(settings, Engine(), None).write_generated(build_plan(settings, "cpu", []))
    Launcher(settings, Engine(), None).down(plan_for_running(settings), False, False)
    assert not (kit / ".airig").exists()


def test_down_keeps_the_launchers_history_and_readme_says_which(kit):
    """README said `.airig/` keeps only `tuning.log` (issue 35 §5): `down` keeps the
    image lock, the update log and the proofs' verdicts too, and README names each."""
    from airig.launcher.images.lock import LOCK_FILE
    from airig.launcher.lifecycle.update import LOG_FILE
    from airig.launcher.proofs.cache import PROOFS_FILE

    kept = sorted(["tuning.log", LOCK_FILE, LOG_FILE, PROOFS_FILE])
    write_env(kit)
    settings = load_settings(kit)
    Launcher(settings, Engine(), None).write_generated(build_plan(settings, "cpu", []))
    for name in kept:
        (kit / ".airig" / name).write_text("{}\n")
    Launcher(settings, Engine(), None).down(plan_for_running(settings), False, False)
    assert sorted(p.name for p in (kit / ".airig").iterdir()) == kept
    readme = (ROOT / "README.md").read_text()
    [row] = [
        line for line in readme.splitlines() if line.startswith("| `python start_services.py down")
    ]
    said = row.split("keeps only", 1)[1].split(")", 1)[0]
    assert sorted(re.findall(r"`([^`]+)`", said.split(":", 1)[0])) == kept, row


def test_down_leaves_a_stack_env_the_user_made(kit):
    write_env(kit)
    settings = load_settings(kit)
    (kit / "01-infra" / ".env").symlink_to("../.env")  # not ours: an older kit's, or theirs
    (kit / "02-compute" / ".env").write_text("X=1\n")
    Launcher(settings, Engine(), None).down(plan_for_running(settings), False, False)
    assert (kit / "01-infra" / ".env").is_symlink() and (kit / "02-compute" / ".env").exists()
