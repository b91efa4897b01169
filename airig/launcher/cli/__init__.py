"""The command line: `app.py`'s one Typer app. Commands reach it three ways: defined on it
in `app.py`; command groups (`models`, `token`, `escalations`, `workers`) that a file's
`build_*_app()` makes and `app.py` mounts with add_typer; and top-level commands a file's
`register(app)` adds (tasks, runbook, triage, search, backup, update)."""
