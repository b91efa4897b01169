"""`backup` and `restore`: the kit's store, results, settings and workflows in one archive
(``airig/launcher/lifecycle/backup.py``, ``restore.py``; the layout in ``backup_archive.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from airig.launcher.console import console
from airig.launcher.settings import Settings

WHEN = ("hourly", "daily", "weekly")


def register(app: typer.Typer, settings_of: Callable[[], Settings],
             run_up: Callable[[], None]) -> None:  # fmt: skip
    @app.command()
    def backup(
        to: Annotated[
            Path | None,
            typer.Option(
                "--to",
                help="Folder for the archive (default: backups/ here; another disk is better).",
            ),  # fmt: skip
        ] = None,
        models: Annotated[
            bool, typer.Option("--models", help="Also the models (they can be pulled again).")
        ] = False,
        inputs: Annotated[
            bool,
            typer.Option(
                "--inputs",
                help="Also the uploaded inputs (the data volume's inputs/; you have them, and "
                "they may be large).",
            ),  # fmt: skip
        ] = False,
        keep: Annotated[
            int | None,
            typer.Option("--keep", min=1, help="Then delete all but the N newest archives there."),
        ] = None,
        check: Annotated[
            Path | None,
            typer.Option("--verify", help="Check an archive against its manifest; change nothing."),
        ] = None,
        schedule: Annotated[
            str | None,
            typer.Option(
                "--schedule", help="Print a cron line and systemd timer: hourly | daily | weekly."
            ),  # fmt: skip
        ] = None,
    ) -> None:
        """Archive the running kit: its store and search index (consistent snapshots),
        results, outputs, .env, tuning log, image lock and ComfyUI workflows; --inputs adds
        the uploaded inputs, --models the models."""
        from airig.common.errors import ConfigError
        from airig.launcher.lifecycle.backup import schedule_lines, take
        from airig.launcher.lifecycle.backup_archive import verify

        if check is not None:
            manifest = verify(check)
            size = sum(e.size for e in manifest.files)
            console.print(
                f"[green]✔[/] {escape(check.name)}: {len(manifest.files)} files, "
                f"{_bytes(size)}, every sha256 matches; taken "
                f"{_ago(manifest.created_at)} (airig {escape(manifest.airig_version)}, "
                f"models {'included' if manifest.models_included else 'not included'})"
            )
            _contents(manifest)
            return
        settings = settings_of()
        folder = to if to is not None else settings.root / "backups"
        if schedule is not None:
            if schedule not in WHEN:
                raise ConfigError(
                    f"--schedule {schedule!r} is not one of {', '.join(WHEN)}",
                    "e.g. --schedule daily",
                )
            print(schedule_lines(settings, folder.expanduser().resolve(), keep or 7, schedule))
            return
        from airig.launcher.brain_client import BrainClient
        from airig.launcher.compose.docker import Docker

        client = BrainClient.from_settings(settings)
        result = take(
            settings, Docker(), folder, models, keep, lambda body: _record(client, body),
            lambda line: console.print(escape(line)), inputs=inputs,
        )  # fmt: skip
        files = len(result.manifest.files)
        console.print(
            f"[green]✔[/] Wrote {escape(str(result.path))} ({_bytes(result.size)}, {files} "
            f"files, sha256 {result.sha256[:12]}…). It holds .env with the kit's secrets: "
            "it is readable by you only (mode 600); keep it private."
        )
        _contents(result.manifest)
        if result.recorded:
            console.print(f"[yellow]![/] Not recorded with the brain: {escape(result.recorded)}")
        for gone in result.pruned:
            console.print(f"  deleted the older {escape(gone.name)} (--keep {keep})")
        console.print(
            f"Restore it with: python start_services.py restore {escape(str(result.path))}"
        )

    @app.command()
    def restore(
        archive: Annotated[Path, typer.Argument(help="An archive `backup` wrote.")],
        yes: Annotated[
            bool,
            typer.Option("--yes", help="Replace this kit's data (store, results, outputs, .env)."),
        ] = False,
    ) -> None:
        """Bring back the kit an archive holds (a fresh clone, or after `down --volumes`),
        then start it; models it does not hold are pulled and verified as on a first `up`."""
        from airig.launcher.compose.docker import Docker
        from airig.launcher.lifecycle.restore import prepare
        from airig.launcher.settings import repo_root

        manifest = prepare(
            repo_root(), archive, yes, Docker(), lambda line: console.print(escape(line))
        )
        console.print(
            f"[green]✔[/] {escape(archive.name)} verified; .env and the launcher's state "
            f"written (taken {_ago(manifest.created_at)}). Starting the kit; its store and "
            "files go back into the volumes before any service reads them …"
        )
        _contents(manifest)
        run_up()


def _record(client: Any, body: dict[str, Any]) -> None:
    from airig.common.errors import AirigError
    from airig.launcher.lifecycle.backup_archive import BackupError

    try:
        client.record_backup(body)
    except AirigError as exc:
        raise BackupError(exc.message) from None


def backup_line(store: dict[str, Any]) -> str:
    """`status`: the newest backup's age (the brain's /v1/store)."""
    at = store.get("last_backup_at")
    if not at:
        return "[yellow]No backup yet[/]: python start_services.py backup"
    name = escape(str(store.get("last_backup_archive") or ""))
    return f"Last backup: {_ago(float(at))} ({name})"


def _ago(ts: float) -> str:
    seconds = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _contents(manifest: Any) -> None:
    """What an archive holds, part by part, and what it leaves out."""
    from airig.launcher.lifecycle.backup_archive import describe

    held, left = describe(manifest)
    console.print(f"  {escape(held)}")
    console.print(f"  {escape(left)}")


def _bytes(size: float) -> str:
    from airig.launcher.lifecycle.backup_archive import human_bytes

    return human_bytes(size)
