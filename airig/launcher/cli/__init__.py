"""The command line: one Typer app per file, joined in `app.py` with add_typer."""
