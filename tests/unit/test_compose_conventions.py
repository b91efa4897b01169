"""The compose conventions every stack keeps (style.md #6, #7) — read from the files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
STACKS = ["01-infra", "02-compute", "03-agents"]
ONE_SHOT = {"volumes-init", "ollama-init", "comfyui-init", "whisper-init"}
# The kit's own services (its image) are hardened; these keep a capability, and why.
KEPT_CAPABILITIES = {
    "volumes-init": ["CHOWN", "DAC_OVERRIDE"],  # chowns the volumes, mkdir in owned ones
    # write into model stores other images' users own (speaches' uid 1000)
    **dict.fromkeys(["ollama-init", "comfyui-init", "whisper-init"], ["DAC_OVERRIDE"]),
}
# Limits a user sets in .env (the rest are fixed: small helpers).
LIMIT_KNOBS = {
    "brain": ("AIRIG_BRAIN_MEM_LIMIT", "AIRIG_BRAIN_PIDS_LIMIT"),
    "brain-2": ("AIRIG_BRAIN_MEM_LIMIT", "AIRIG_BRAIN_PIDS_LIMIT"),  # brain's, merged
    "worker-cpu": ("AIRIG_WORKER_MEM_LIMIT", "AIRIG_WORKER_PIDS_LIMIT"),
}


def services(stack: str) -> dict:
    return yaml.safe_load((ROOT / stack / "compose.yaml").read_text())["services"]


def all_services():
    return [(stack, name, svc) for stack in STACKS for name, svc in services(stack).items()]


@pytest.mark.parametrize(
    "stack,name,svc", all_services(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_service_conventions(stack, name, svc):
    assert "container_name" not in svc, f"{stack}/{name}: container_name blocks reruns"
    image = svc.get("image", "")
    assert image.startswith("${"), f"{stack}/{name}: image must come from .env, got {image!r}"
    for port in svc.get("ports", []):
        # host address and port both from variables: no fixed host ports
        assert re.fullmatch(
            r"\$\{AIRIG_BIND_ADDRESS:-127\.0\.0\.1\}:\$\{[A-Z_]+:-\d+\}:\d+", port
        ), port
    if name in ONE_SHOT:
        assert svc.get("restart") == "no"
    else:
        assert "healthcheck" in svc, f"{stack}/{name}: long-running services need a healthcheck"
        assert svc.get("restart") == "unless-stopped"
    assert svc.get("logging", {}).get("options", {}).get("max-size"), f"{stack}/{name}: rotate logs"


def kit_services():
    return [s for s in all_services() if s[2]["image"].startswith("${AIRIG_IMAGE")]


@pytest.mark.parametrize(
    "stack,name,svc", kit_services(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_kit_services_are_hardened(stack, name, svc):
    """What a task (or a compromised service) cannot do: gain a capability or a privilege,
    write outside its volumes and tmpfs, or take the host's memory and process table."""
    assert svc.get("cap_drop") == ["ALL"], f"{stack}/{name}"
    assert svc.get("cap_add", []) == KEPT_CAPABILITIES.get(name, []), f"{stack}/{name}"
    assert "no-new-privileges:true" in svc.get("security_opt", []), f"{stack}/{name}"
    assert svc.get("read_only") is True, f"{stack}/{name}"
    assert "/tmp" in [mount.split(":")[0] for mount in svc.get("tmpfs", [])], f"{stack}/{name}"
    assert svc.get("mem_limit") and svc.get("pids_limit"), f"{stack}/{name}: limits"
    for key in ("privileged", "init", "pid", "ipc", "network_mode", "devices"):
        assert key not in svc, f"{stack}/{name}: {key}"
    assert not [v for v in svc.get("volumes", []) if "docker.sock" in str(v)], f"{stack}/{name}"
    memory, pids = LIMIT_KNOBS.get(name, ("", ""))
    assert str(svc["mem_limit"]).startswith("${" + memory) == bool(memory), svc["mem_limit"]
    assert str(svc["pids_limit"]).startswith("${" + pids) == bool(pids), svc["pids_limit"]


KIT_SERVICES = {"files", "models-ready", "brain", "brain-2", "worker-cpu", "gateway"}


def test_every_kit_service_is_checked():
    names = {name for _, name, _ in kit_services()}
    assert names == ONE_SHOT | KIT_SERVICES


def test_every_init_container_has_a_consumer():
    consumers = {
        dep
        for stack in STACKS
        for svc in services(stack).values()
        for dep, cond in (svc.get("depends_on") or {}).items()
        if isinstance(cond, dict) and cond.get("condition") == "service_completed_successfully"
    }
    assert consumers >= ONE_SHOT


def test_variants_share_the_alias():
    compute = services("02-compute")
    for base in ("ollama", "comfyui", "whisper"):
        variants = [n for n in compute if n.startswith(base + "-") and not n.endswith("init")]
        profiles = ["cpu", "gpu-amd", "gpu-intel", "gpu-nvidia"]
        assert sorted(v.split("-", 1)[1] for v in variants) == profiles
        for v in variants:
            assert compute[v]["networks"]["ai"]["aliases"] == [base]
            assert compute[v]["profiles"] == [v.split("-", 1)[1]]


def test_env_example_pins_every_image():
    text = (ROOT / ".env.example").read_text()
    images = re.findall(r"^[A-Z_]*IMAGE[A-Z_]*=(.+)$", text, re.M)
    assert images
    for image in images:
        if "/" in image or ":" in image:
            assert not image.endswith(":latest") and ":" in image.split("/")[-1], image


def test_ollama_is_tuned_like_the_seed_rig():
    from dotenv import dotenv_values

    env = dotenv_values(ROOT / ".env.example")
    assert env["OLLAMA_CONTEXT_LENGTH"] == "8192"
    assert env["OLLAMA_FLASH_ATTENTION"] == "1"
    assert env["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    assert env["OLLAMA_MAX_LOADED_MODELS"] == "2"
    assert env["AIRIG_BIND_ADDRESS"] == "127.0.0.1"


# What a healthcheck's `python -m MODULE --check` must not import: the provider SDKs and the
# web stack take seconds to import on a loaded host, and the check has `timeout:` (5 s) to
# answer. The gateway's check imported anthropic and openai (3-4 s idle) and turned the
# gateway unhealthy on a busy CI host.
# pydantic (the settings) and requests: a check runs every 5-10 s for as long as the kit
# runs, and those imports were 0.15-0.25 s of CPU each time (airig/common/healthcheck.py).
HEAVY_FOR_A_CHECK = {
    "anthropic", "openai", "fastapi", "uvicorn", "starlette", "httpx", "ollama", "pydantic",
    "pydantic_settings", "requests", "sqlalchemy", "psycopg",
}  # fmt: skip
PROBE = """
import runpy, sys
sys.argv = ["check", "--check"]
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit:
    pass
print(" ".join(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


def python_checks():
    found = []
    for stack, name, svc in all_services():
        test = (svc.get("healthcheck") or {}).get("test") or []
        if test[:3] == ["CMD", "python", "-m"] and "--check" in test:
            found.append((f"{stack}/{name}", test[3]))
    return found


def test_the_kit_has_python_healthchecks_to_read():
    assert {module for _, module in python_checks()} >= {"airig.gateway", "airig.brain"}


@pytest.mark.parametrize("where,module", python_checks(), ids=lambda v: v)
def test_a_healthcheck_imports_nothing_slow(where, module, tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    imported = set(done.stdout.split())
    assert "airig" in imported, done.stderr[-2000:]
    assert imported & HEAVY_FOR_A_CHECK == set(), (
        f"{where}: `python -m {module} --check` imports {sorted(imported & HEAVY_FOR_A_CHECK)}: "
        "import them in the serving path only"
    )
