"""``python -m airig.provision <service>``: what an init container runs.

Waits for the server, provisions (or only verifies, or lists) every configured model,
prints one JSON event per line, and exits 0 only when every model verified. A failure
is one ``failed`` line naming the model and the cause; never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
from enum import StrEnum
from typing import Annotated

import requests
import typer

from airig.common.errors import AirigError, ConfigError
from airig.provision.cache import VerifyCache
from airig.provision.comfyui import ComfyUIProvisioner
from airig.provision.common import Provisioner
from airig.provision.events import Emitter
from airig.provision.http import wait_healthy
from airig.provision.load_proof import FAILED, Http, load_proof
from airig.provision.manifest import load_manifest
from airig.provision.ollama import OllamaProvisioner
from airig.provision.settings import ProvisionSettings
from airig.provision.verify import Verifier


class Service(StrEnum):
    ollama = "ollama"
    whisper = "whisper"
    comfyui = "comfyui"


class Mode(StrEnum):
    ensure = "ensure"  # verify; pull what is missing or broken (the init container)
    verify = "verify"  # verify only; change nothing (`models verify`)
    pull = "pull"  # pull again even when verified; repair what is broken (`models pull`)
    list = "list"  # what is on the volume and what is configured (`models list`)


def build(service: Service, settings: ProvisionSettings, emitter: Emitter) -> Provisioner:
    """The provisioner for ``service``, wired from the container's settings."""
    from airig.provision.whisper import WhisperProvisioner

    cache = VerifyCache(settings.airig_verify_cache)
    verifier = Verifier(cache, settings.airig_verify_settle_seconds)
    if service is Service.ollama:
        return OllamaProvisioner(
            settings.ollama_url,
            settings.ollama_models_dir,
            settings.airig_ollama_models,
            verifier,
            emitter,
        )
    if service is Service.whisper:
        return WhisperProvisioner(
            settings.whisper_url,
            settings.whisper_hub_dir,
            settings.airig_whisper_models,
            verifier,
            emitter,
        )
    manifest = load_manifest(settings.airig_comfyui_manifest)
    return ComfyUIProvisioner(
        settings.comfyui_url, settings.comfyui_root, manifest.models, verifier, emitter
    )


def describe(exc: BaseException) -> str:
    """One line for any failure: our own errors carry it, OS and HTTP errors get one."""
    if isinstance(exc, AirigError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"disk full ({exc.filename or 'volume'})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    if isinstance(exc, requests.RequestException):
        return f"server unreachable ({type(exc).__name__})"
    return " ".join(f"unexpected {type(exc).__name__}: {exc}".split())  # multi-line → one


def process(provisioner: Provisioner, mode: Mode, models: list[str], emitter: Emitter) -> int:
    """Handle each model on its own so one failure still reports on all others."""
    failures = 0
    for model in models:
        try:
            if mode is Mode.verify:
                report = provisioner.verify(model)
            else:
                report = provisioner.ensure(model, force=mode is Mode.pull)
        except Exception as exc:  # noqa: BLE001 - the edge: every cause becomes one line
            provisioner.verifier.cache.unmark_model(model)
            emitter.failed(model, describe(exc))
            failures += 1
            continue
        provisioner.verifier.cache.mark_model(model, report.size, report.files)
        emitter.verified(model, report.size, report.files, report.cached)
    return failures


def run(
    service: Service,
    mode: Mode,
    models: list[str] | None = None,
    settings: ProvisionSettings | None = None,
    emitter: Emitter | None = None,
) -> int:
    """Exit code: 0 when every model verified (or was listed), 1 otherwise; 3 when they all
    verified but Ollama's load proof (AIRIG_LOAD_PROOF=gpu, ``ensure`` only) failed."""
    emitter = emitter or Emitter(service.value)
    provisioner: Provisioner | None = None
    try:
        settings = settings or ProvisionSettings()
        provisioner = build(service, settings, emitter)
        if mode is Mode.list:
            for row in provisioner.listing():
                emitter.listed(row.model, row.size, row.configured, row.present)
            return 0
        # Ollama's load proof runs in the init (ensure) only, once every model verified.
        prove = service is Service.ollama and mode is Mode.ensure and load_proof_wanted()
        http = getattr(provisioner, "http", None) or requests.Session()
        wanted = models or provisioner.configured()
        if not wanted:
            return prove_load(settings.ollama_url, http, [], emitter) if prove else 0
        wait_healthy(service.value, provisioner.health_url, settings.airig_server_wait_seconds)
        if process(provisioner, mode, wanted, emitter):
            return 1
        return prove_load(settings.ollama_url, http, wanted, emitter) if prove else 0
    except Exception as exc:  # noqa: BLE001 - the edge of the init container
        emitter.failed(None, describe(exc))
        return 1
    finally:
        if provisioner is not None:
            _save_cache(provisioner)


# ollama-init's exit code when the load proof fails: the init fails, so `up` does, and the
# launcher reads the `load_proof` line from its logs (airig/launcher/proofs/host.py).
LOAD_PROOF_FAILED = 3


def load_proof_wanted() -> bool:
    """AIRIG_LOAD_PROOF: ``gpu`` proves a model load (the launcher sets it where Ollama runs
    on CUDA or ROCm); ``off`` or unset (the CPU profile, the default) changes nothing."""
    value = os.environ.get("AIRIG_LOAD_PROOF", "").strip().lower()
    if value in ("", "off"):
        return False
    if value == "gpu":
        return True
    raise ConfigError(f"AIRIG_LOAD_PROOF={value!r} is neither gpu nor off", "use gpu or off")


def prove_load(url: str, http: Http, models: list[str], emitter: Emitter) -> int:
    """Ollama's second proof step, after every model verified: one ``load_proof`` line
    ``{"event": "load_proof", "service": "ollama", "model", "status", "size_vram", "said",
    "image"}``; exit code 3 when it failed."""
    found = load_proof(url, models, http)
    emitter.emit(
        "load_proof",
        found["model"],
        status=found["status"],
        size_vram=found["size_vram"],
        said=found["said"],
        image=os.environ.get("OLLAMA_IMAGE_PROVED", ""),
    )
    return LOAD_PROOF_FAILED if found["status"] == FAILED else 0


def _save_cache(provisioner: Provisioner) -> None:
    # A cache that cannot be written costs a re-hash next time, nothing more.
    with contextlib.suppress(OSError):
        provisioner.verifier.cache.save()


app = typer.Typer(add_completion=False, help="Provision and verify the models of one service.")


@app.command()
def main(
    service: Annotated[Service, typer.Argument(help="Which server's models.")],
    verify_only: Annotated[bool, typer.Option("--verify-only", help="Change nothing.")] = False,
    pull: Annotated[bool, typer.Option("--pull", help="Pull again; repair broken files.")] = False,
    list_models: Annotated[bool, typer.Option("--list", help="List models on the volume.")] = False,
    model: Annotated[
        list[str] | None, typer.Option("--model", help="Only this model (repeatable).")
    ] = None,
) -> None:
    if sum((verify_only, pull, list_models)) > 1:
        raise typer.BadParameter("choose one of --verify-only, --pull, --list")
    mode = Mode.ensure
    if verify_only:
        mode = Mode.verify
    elif pull:
        mode = Mode.pull
    elif list_models:
        mode = Mode.list
    raise typer.Exit(run(service, mode, model))
