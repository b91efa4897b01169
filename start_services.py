#!/usr/bin/env python3
"""Start airig: `python start_services.py [--profile cpu|gpu-nvidia|gpu-amd] [COMMAND]`.

Everything lives in the `airig` package; this file only makes sure it can be imported
and runs its command line. On a fresh clone it creates `.venv/` and installs the kit
there (system Pythons on Debian/Ubuntu refuse `pip install` outside a venv), then
re-runs itself inside it. Only the standard library is used before that.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PY = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
# The host launcher's side of pyproject.toml (its dependencies and this extra); the
# servers' side goes into the kit's image only.
EXTRA = "launcher"

if sys.version_info < (3, 11):  # noqa: UP036 (this file must run on old Pythons to say so)
    sys.exit(f"airig needs Python 3.11 or newer (this is {sys.version.split()[0]}).")


def _in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def _bootstrap() -> None:
    print("First run: installing airig and its dependencies into .venv/ …", flush=True)
    steps = [
        [sys.executable, "-m", "venv", str(VENV)],
        [str(VENV_PY), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[{EXTRA}]"],
    ]
    for step in steps:
        if subprocess.run(step).returncode != 0:
            sys.exit(
                f"✘ setting up .venv failed: {' '.join(step)}\n"
                "  → install python3-venv (Debian/Ubuntu), check your network, run again"
            )


try:
    from airig.launcher.cli.app import main
except ImportError:
    if _in_venv() or os.environ.get("AIRIG_NO_BOOTSTRAP"):
        sys.exit(f"✘ airig's dependencies are missing\n  → run: pip install -e '.[{EXTRA}]'")
    if (
        not VENV_PY.exists()
        or subprocess.run(
            [str(VENV_PY), "-c", "import airig.launcher.cli.app"], capture_output=True
        ).returncode
        != 0
    ):
        _bootstrap()
    os.execv(str(VENV_PY), [str(VENV_PY), str(Path(__file__).resolve()), *sys.argv[1:]])

main()
