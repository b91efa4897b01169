"""Every external volume a later stack mounts is created by 01-infra on a fresh kit.

Compose creates a declared volume only when one of the project's services mounts it; a
volume 01-infra declares but no 01-infra service mounts does not exist when 02-compute
starts, and `up` fails with `external volume "…" not found` (found by the e2e kit when
the ComfyUI volumes were split)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def compose(stack: str) -> dict:
    return yaml.safe_load((ROOT / stack / "compose.yaml").read_text())


def mounted(model: dict) -> set[str]:
    names = set()
    for service in model["services"].values():
        for volume in service.get("volumes") or ():
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source")
            if source in (model.get("volumes") or {}):
                names.add(source)
    return names


def test_every_external_volume_is_mounted_by_an_infra_service():
    infra = compose("01-infra")
    created = {infra["volumes"][key]["name"] for key in mounted(infra)}
    for stack in ("02-compute", "03-agents"):
        model = compose(stack)
        external = {
            spec["name"] for key, spec in (model.get("volumes") or {}).items()
            if spec.get("external") and key in mounted(model)
        }  # fmt: skip
        assert external <= created, f"{stack}: never created: {sorted(external - created)}"
