"""ComfyUI: download each manifest file under a temporary name, prove it, then publish it.

A file reaches its real name (where ComfyUI and workflows see it) only after its size
and sha256 match the manifest; a mismatch deletes the download and fails naming it.
The model counts once the file passes the verifier (regular, readable, non-zero,
stable size, digest) and ComfyUI's ``GET /models/<folder>`` lists it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import requests

from airig.common.errors import ProvisionError
from airig.provision.cache import FileIdentity
from airig.provision.common import (
    GrowthWatcher,
    Listing,
    ModelReport,
    ServerProvisioner,
    merge_listing,
    remove_path,
)
from airig.provision.download import fetch, partial_bytes, partial_path
from airig.provision.events import Emitter
from airig.provision.http import API_TIMEOUT, error_text
from airig.provision.manifest import ComfyModel
from airig.provision.verify import ExpectedFile, FileCheckError, Verifier, sha256_file


class ComfyUIProvisioner(ServerProvisioner):
    service = "comfyui"
    health_path = "/system_stats"

    def __init__(
        self,
        url: str,
        root: Path,
        models: list[ComfyModel],
        verifier: Verifier,
        emitter: Emitter,
        session: requests.Session | None = None,
    ) -> None:
        super().__init__(url, models, verifier, emitter, session)
        self.root = root
        self.entries = {m.name: m for m in models}

    def configured(self) -> list[str]:
        return list(self.entries)

    def _entry(self, name: str) -> ComfyModel:
        try:
            return self.entries[name]
        except KeyError:
            raise ProvisionError(
                f"comfyui model {name!r} is not in the manifest",
                "add it to the manifest (AIRIG_COMFYUI_MANIFEST) with url, sha256 and size",
            ) from None

    def final_path(self, entry: ComfyModel) -> Path:
        return self.root / "models" / entry.folder / entry.filename

    def ensure(self, name: str, force: bool = False) -> ModelReport:
        """Verify; download when missing; a corrupt copy is deleted and downloaded again.

        ``force`` changes nothing here: the manifest pins the bytes, so a verified file
        is already the newest one.
        """
        entry = self._entry(name)
        final = self.final_path(entry)
        try:
            return self.verify(name)
        except FileCheckError as exc:
            if exc.corrupt:  # a directory in the file's place is corrupt too
                remove_path(final)
        except ProvisionError:
            if final.is_file():
                raise  # the file is fine but ComfyUI does not list it: a download won't help
        self._download(entry, final)
        # Hashed moments ago in _publish: fresh, even though the verifier read the cache.
        return replace(self.verify(name), cached=False)

    def _download(self, entry: ComfyModel, final: Path) -> None:
        partial = partial_path(final)
        report = lambda done: self.emitter.progress(entry.name, done, entry.size)  # noqa: E731
        try:
            with GrowthWatcher(lambda: partial_bytes(partial), report):
                tool, why = fetch(
                    self.root, str(entry.url), entry.folder, partial, entry.size, report
                )
        except ProvisionError as exc:
            exc.message = f"comfyui model {entry.name!r}: {exc.message}"
            raise
        # Which tool brought the bytes, and why not comfy-cli: a fallback on every
        # download is a fault to see, not a detail to hide.
        self.emitter.downloader(entry.name, tool, why)
        self.emitter.progress(entry.name, partial.stat().st_size, entry.size, final=True)
        self._publish(entry, partial, final)

    def _publish(self, entry: ComfyModel, partial: Path, final: Path) -> None:
        """Check size and sha256 of the finished download, then rename it into place."""
        size = partial.stat().st_size
        if size != entry.size:
            partial.unlink()
            raise ProvisionError(
                f"comfyui model {entry.name!r}: downloaded {size} bytes, manifest says "
                f"{entry.size}; the bad download was deleted",
                "check the url and size in the manifest",
            )
        digest = sha256_file(partial)
        if digest != entry.sha256:
            partial.unlink()
            raise ProvisionError(
                f"comfyui model {entry.name!r}: sha256 mismatch (expected {entry.sha256[:12]}..., "
                f"got {digest[:12]}...); the bad download was deleted",
                "check the url and sha256 in the manifest",
            )
        os.replace(partial, final)
        # Same inode, just hashed: remember it so the verification below needs no re-hash.
        self.verifier.cache.remember(final.resolve(), FileIdentity.of(final.stat()), digest)

    def verify(self, name: str) -> ModelReport:
        entry = self._entry(name)
        final = self.final_path(entry)
        expected = ExpectedFile(final, entry.size, entry.sha256)
        try:
            report = ModelReport.of(name, self.verifier.verify([expected]))
        except FileCheckError as exc:
            exc.message = f"comfyui model {name!r}: {exc.message}"
            raise
        self._check_listed(entry)
        return report

    def _check_listed(self, entry: ComfyModel) -> None:
        response = self.http.get(f"{self.url}/models/{entry.folder}", timeout=API_TIMEOUT)
        if response.status_code != 200:
            raise ProvisionError(
                f"comfyui model {entry.name!r}: /models/{entry.folder} {error_text(response)}"
            )
        if entry.filename not in response.json():
            raise ProvisionError(
                f"comfyui model {entry.name!r}: ComfyUI does not list it in /models/{entry.folder}",
                "ComfyUI lists only known extensions (.safetensors, .ckpt, .pt, .pth, .bin, ...)",
            )

    def listing(self) -> list[Listing]:
        found: dict[str, int | None] = {}
        models = self.root / "models"
        for path in sorted(models.glob("*/*")):
            if path.is_file() and "-partial" not in path.name and not path.name.startswith("."):
                found[f"{path.parent.name}/{path.name}"] = path.stat().st_size
        return merge_listing(self.configured(), found)
