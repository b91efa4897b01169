"""The `airig` / `python start_services.py` command line (typer + rich).

Thin commands that hand off to plain functions; `main` runs the app behind the edge
(`edge.py`), where an AirigError or a usage error becomes one red line plus a hint.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from airig import __version__
from airig.common.errors import ConfigError
from airig.launcher.cli.edge import run_at_edge
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import plan_for_running, worker_layout
from airig.launcher.console import console, err_console
from airig.launcher.envfile import ensure_env
from airig.launcher.settings import Settings, checkout_settings, repo_root
from airig.launcher.views.status import checks_table, layout_table, service_rows, services_table

if TYPE_CHECKING:
    from airig.launcher.lifecycle.up import UpResult

app = typer.Typer(
    add_completion=False,
    invoke_without_command=True,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    help="airig: a local AI cluster on your GPU rig. With no command: up.",
)

ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile", "-p", help="cpu | gpu-nvidia | gpu-amd | gpu-intel (default: detect)"
    ),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the docker commands, start nothing.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _settings(profile: str | None = None) -> Settings:
    """The checkout's settings (``repo_root``), with the --profile flag when given."""
    return checkout_settings({"AIRIG_PROFILE": profile})


def _version(value: bool) -> None:
    if value:
        console.print(f"airig {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    ctx: typer.Context,
    profile: ProfileOpt = None,
    dry_run: DryRunOpt = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True)] = False,
) -> None:
    if ctx.invoked_subcommand is None:
        up(profile=profile, dry_run=dry_run)


@app.command()
def up(
    profile: ProfileOpt = None,
    dry_run: DryRunOpt = False,
    reprove: Annotated[
        bool,
        typer.Option(
            "--reprove", help="Prove every GPU image on the GPU again, kept verdicts aside."
        ),
    ] = False,
    recipe: Annotated[
        list[str] | None,
        typer.Option(
            "--recipe",
            help="Pull the models this recipe (recipes/NAME.yaml) runs: added to "
            "AIRIG_RECIPES in .env, so later `up`s and `submit` count them (repeatable).",
        ),
    ] = None,
) -> None:
    """Detect the hardware, check the host and start all three stacks."""
    from airig.launcher.lifecycle.up import Launcher  # hardware detection: not loaded for `status`

    root = repo_root()
    if not dry_run:
        _ensure_env(root)
    settings = _settings(profile)
    if recipe:
        settings = _with_recipes(settings, recipe, profile, write=not dry_run)
    launcher = Launcher(settings, Docker(), console)
    result = launcher.up(dry_run=dry_run, reprove=reprove)
    if dry_run:
        _print_dry_run(result, settings)
        return
    rows = service_rows(launcher.docker, result.plan)
    console.print(services_table(rows, f"airig is up ({result.plan.profile})"))
    if settings.joined:
        _say_joined(settings)


def _with_recipes(
    settings: Settings, names: list[str], profile: str | None, write: bool
) -> Settings:
    """``up --recipe NAME``: the names checked, then added to AIRIG_RECIPES in .env (kept:
    `submit` checks a recipe's models against what the rig pulls, and the next `up` pulls
    them again); with --dry-run, for this run only."""
    from airig.launcher.envfile import set_values
    from airig.launcher.recipes import RECIPES_KEY, recipe_models

    for name in names:
        recipe_models(settings, name)  # an unknown name: one line naming the recipes
    merged = list(dict.fromkeys([*settings.recipes, *names]))
    value = ",".join(merged)
    if write and merged != list(settings.recipes):
        set_values(settings.env_file, {RECIPES_KEY: value})
        console.print(f"{RECIPES_KEY}={escape(value)} written to .env: `up` pulls their models")
    return checkout_settings({"AIRIG_PROFILE": profile, RECIPES_KEY: value})


@app.command()
def join(
    brain: Annotated[
        str, typer.Option("--brain", help="The brain's URL, e.g. https://brain.example.lan")
    ],
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="The join token (`token create --join` over there); `ps` and your shell's "
            "history show it: prefer AIRIG_JOIN_TOKEN, --token-file or the prompt.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="Read the join token from this file.")
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="Allow plain http to another machine.")
    ] = False,
    profile: ProfileOpt = None,
    dry_run: DryRunOpt = False,
) -> None:
    """Join another machine's brain: this rig's models and GPU workers, no brain here.

    The token: --token-file, AIRIG_JOIN_TOKEN or a hidden prompt (--token shows in `ps`)."""
    from airig.launcher.lifecycle.join import ARGV_NOTE, join_rig, join_token

    token, source = join_token(token, token_file, os.environ, sys.stdin.isatty())
    if source == "--token":
        err_console.print(f"[yellow]⚠ {escape(ARGV_NOTE)}[/]", soft_wrap=True)
    settings, result = join_rig(
        repo_root(), brain, token, insecure, profile, dry_run, console, _ensure_env, Docker(),
        token_source=source,
    )  # fmt: skip
    if dry_run:
        _print_dry_run(result, settings)
        return
    rows = service_rows(Docker(), result.plan)
    console.print(services_table(rows, f"airig is up ({result.plan.profile}, joined)"))
    _say_joined(settings)


def _print_dry_run(result: UpResult, settings: Settings) -> None:
    console.print("[bold]Dry run[/]: these commands would run, in order:")
    for line in result.commands:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(layout_table(worker_layout(result.plan, str(settings.cpu_workers))))


def _say_joined(settings: Settings) -> None:
    url = escape(settings.join_brain_url)
    rig = escape(settings.rig_name)
    console.print(
        f"Joined the brain at [bold]{url}[/] as rig [bold]{rig}[/]: its workers are named "
        f"{rig}-…; `status` on the brain's machine lists them with their host."
    )


def _ensure_env(root: Path) -> None:
    env, example = root / ".env", root / ".env.example"
    asked = not env.exists() and sys.stdin.isatty()
    if asked and not typer.confirm(
        ".env does not exist. Create it from .env.example?", default=True
    ):
        raise ConfigError(".env is required", "cp .env.example .env, edit it, run again")
    report = ensure_env(env, example)
    if report.created:
        console.print("Created .env from .env.example (edit it to choose models and images).")
    if report.added_keys:
        console.print(f"Added new settings to .env: {escape(', '.join(report.added_keys))}")
    if report.generated_secrets:
        names = escape(", ".join(report.generated_secrets))
        console.print(f"Generated secrets in .env: {names} (not shown)")


@app.command()
def down(
    volumes: Annotated[
        bool, typer.Option("--volumes", help="Also delete data, state and models.")
    ] = False,
    keep_models: Annotated[
        bool, typer.Option("--keep-models", help="With --volumes: keep models.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask before deleting models.")
    ] = False,
) -> None:
    """Stop and remove every stack (in reverse order) and the shared network."""
    settings = _settings()
    if volumes and not keep_models and not yes:
        if not sys.stdin.isatty():
            raise ConfigError(
                "--volumes deletes downloaded models", "add --yes to confirm, or --keep-models"
            )
        if not typer.confirm(
            "Delete all downloaded models too (they take long to pull)?", default=False
        ):
            keep_models = True
    from airig.launcher.lifecycle.up import Launcher

    launcher = Launcher(settings, Docker(), console)
    plan = plan_for_running(settings)
    for line in launcher.down(plan, volumes=volumes, keep_models=keep_models):
        console.print(f"  {escape(line)}")


@app.command()
def status(as_json: JsonOpt = False) -> None:
    """Services, their health and URLs; workers, their GPUs and warnings."""
    from airig.launcher.views.status import brain_store, brain_workers, store_table, workers_table

    settings = _settings()
    rows = service_rows(Docker(), plan_for_running(settings))
    if settings.joined:
        _joined_status(settings, rows, as_json)
        return
    workers = brain_workers(settings) if rows else None
    store = brain_store(settings) if workers is not None else None
    from airig.launcher.lifecycle.update import image_rows

    images = image_rows(settings)  # .airig/images.lock: tag, digest, age
    from airig.launcher.proofs.cache import proof_report

    proofs = proof_report(settings.state_dir)  # .airig/proofs.json: the last up's proofs
    if as_json:
        print(json.dumps({"services": rows, "workers": workers, "store": store,
                          "images": images, "proofs": proofs}, indent=2))  # fmt: skip
        return
    if not rows:
        console.print("Nothing is running. Start with: python start_services.py")
        return
    console.print(services_table(rows))
    if images:
        from airig.launcher.cli.update import images_table

        console.print(images_table(images))
    for line in proof_lines(proofs):
        console.print(line, highlight=False, soft_wrap=True)
    if workers:
        console.print(workers_table(workers))
    elif workers is None:
        console.print("[dim]The brain does not answer yet: no worker list.[/]")
    if store:
        from airig.launcher.cli.backup import backup_line

        console.print(store_table(store))
        console.print(backup_line(store))


def _joined_status(settings: Settings, rows: list[dict[str, Any]], as_json: bool) -> None:
    """A joined rig has no brain: its workers are listed on the brain's machine; here,
    whether that brain still takes this rig's join token."""
    from airig.launcher.lifecycle.join import join_state

    joined = join_state(settings)
    if as_json:
        print(json.dumps({"services": rows, "workers": None, "joined": joined}, indent=2))
        return
    if rows:
        console.print(services_table(rows, "airig services (joined rig)"))
    else:
        console.print("Nothing is running. Start with: python start_services.py")
    _say_joined(settings)
    if joined["token"] != "accepted":
        console.print(f"[red]✘ {escape(joined['token'])}[/]")


@app.command()
def logs(
    service: Annotated[
        str | None, typer.Argument(help="e.g. ollama-cpu, brain; all when omitted")
    ] = None,
    tail: Annotated[int, typer.Option("--tail", "-n")] = 100,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
) -> None:
    """Show the logs of one service, or of every stack."""
    from airig.launcher.views.logs import show_logs

    show_logs(_settings(), Docker(), service, tail, follow)


@app.command()
def doctor(as_json: JsonOpt = False) -> None:
    """Check everything airig depends on; ✔/✘ with a fix for each."""
    from airig.launcher.views.doctor import run_doctor

    checks, data = run_doctor(_settings(), Docker())
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        console.print(checks_table(checks))
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


@app.command()
def detect(as_json: JsonOpt = False, profile: ProfileOpt = None) -> None:
    """Detect GPUs and whether Docker can use them; show the profile airig would pick."""
    from airig.launcher.hardware import render_table
    from airig.launcher.hardware.choice import choose_profile
    from airig.launcher.proofs.cache import proof_report

    settings = _settings(profile)
    choice = choose_profile(settings, Docker(), strict=False)
    if as_json:
        data = {
            "profile": choice.profile,
            "source": choice.source,
            "reasons": choice.reasons,
            "fix": choice.fix,
            "refused": choice.refusal.message if choice.refusal else None,
            "images": [c.to_dict() for c in choice.images.choices] if choice.images else [],
            # Ollama on Vulkan: what vulkaninfo listed in its container (null otherwise)
            "vulkan_probe": choice.vulkan.to_dict() if choice.vulkan else None,
            # what the last `up` proved on the GPUs, and the services a proof moved
            "proofs": proof_report(settings.state_dir),
            "report": choice.report.to_dict(),
        }
        print(json.dumps(data, indent=2, default=str))
    else:
        render_table(choice.report, console)
        console.print(f"Profile: [bold cyan]{escape(choice.profile)}[/] (from {choice.source})")
        if choice.refusal is None:  # a refusal is said once, as the ✘ line below
            for reason in choice.reasons:
                console.print(f"  · {escape(reason)}")
            if choice.fix:
                console.print(f"  [yellow]→ {escape(choice.fix)}[/]")
        if choice.images is not None:
            from airig.launcher.lifecycle.up import image_lines

            for line in image_lines(choice.images):
                console.print(line, highlight=False, soft_wrap=True)
        for line in proof_lines(proof_report(settings.state_dir)):
            console.print(line, highlight=False, soft_wrap=True)
    if choice.refusal is not None:
        # A forced profile `up` would refuse: the same ✘ line and fix, and exit ≠ 0.
        raise choice.refusal
    if choice.images is not None and choice.images.refusals:
        raise typer.Exit(1)  # a pinned image `up` would refuse (its ✘ line is above)


def proof_lines(report: dict[str, Any]) -> list[str]:
    """The last `up`'s GPU proofs, one line each, and each service a proof moved."""
    lines = []
    for row in report.get("verdicts") or ():
        mark = "[green]✔[/]" if row.get("status") == "passed" else "[red]✘[/]"
        lines.append(
            f"  Proof {mark} {escape(str(row.get('service')))} {escape(str(row.get('image')))} "
            f"on {escape(str(row.get('gpu')))} (driver {escape(str(row.get('driver')))}): "
            f"{escape(str(row.get('detail')))}"
        )
    for service, move in sorted((report.get("moved") or {}).items()):
        if isinstance(move, dict):
            lines.append(f"  [yellow]⚠ {escape(service)}: {escape(str(move.get('line')))}[/]")
    return lines


def _mount_subcommands() -> None:
    from airig.launcher.cli.models import build_models_app
    from airig.launcher.cli.runbook import register as register_runbook
    from airig.launcher.cli.tasks import register
    from airig.launcher.cli.tokens import build_tokens_app

    app.add_typer(build_models_app(), name="models")  # the running 02-compute
    app.add_typer(build_tokens_app(_settings), name="token")
    from airig.launcher.cli.escalations import build_escalations_app

    app.add_typer(build_escalations_app(_settings), name="escalations")  # the external tier
    from airig.launcher.cli.workers import build_workers_app

    app.add_typer(build_workers_app(_settings), name="workers")  # list, forget NAME
    from airig.launcher.cli.training import build_training_app

    app.add_typer(build_training_app(_settings), name="training")  # export --out FILE
    register(app)
    register_runbook(app)  # restart, tune
    from airig.launcher.cli.triage import register as register_triage

    register_triage(app)  # triage
    from airig.launcher.cli.search import register as register_search

    register_search(app, _settings)  # search "query": what embed tasks indexed
    from airig.launcher.cli.report import register as register_report

    register_report(app, _settings)  # report: the kit's history per day or week
    from airig.launcher.cli.backup import register as register_backup

    register_backup(app, _settings, lambda: up())  # backup, restore ARCHIVE
    from airig.launcher.cli.update import register as register_update

    register_update(app)  # update [SERVICE] [--check]
    from airig.launcher.cli.store import register as register_store

    register_store(app, _settings, _ensure_env)  # migrate-store: SQLite → PostgreSQL


_mount_subcommands()


def main() -> None:
    """The entry point: the app run behind the error edge (one line, never a traceback)."""
    run_at_edge(app)
