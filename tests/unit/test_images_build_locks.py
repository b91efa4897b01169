"""tests/images/build-all.sh's locks: the e2e modules that start no kit wait for the base,
Vulkan and stand-in images only (``--early``), not for the kit's own image; two builds
never build the same images at once. The real script runs here in a copy of its folder,
every build it calls a stand-in that logs when it starts and ends."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from e2e_lanes import EARLY, early_first

ROOT = Path(__file__).resolve().parents[2]


def stand_in(path: Path, name: str, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "{name} start $$PPID" >>"$CALLS"; sleep {seconds}; echo "{name} end" >>"$CALLS"\n'
    )
    path.chmod(0o755)


def tree(tmp_path: Path, kit_s: float = 3.0) -> Path:
    images = tmp_path / "tests" / "images"
    images.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "images" / "build-all.sh", images / "build-all.sh")
    for script, seconds in [("build-base.sh", 0.3), ("build-vulkan.sh", 0.3),
                            ("wheelhouse.sh", 0.1), ("build-postgres.sh", 0.2),
                            ("registry.sh", 0.1)]:  # fmt: skip
        stand_in(images / script, script.removesuffix(".sh"), seconds)
    stand_in(tmp_path / "tests" / "standins" / "build.sh", "standins", 0.5)
    # build_kit.py is run by python3: a stand-in python3 on PATH runs the kit's stand-in
    stand_in(tmp_path / "kit.sh", "kit", kit_s)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "python3").write_text(f"#!/usr/bin/env bash\nexec bash {tmp_path / 'kit.sh'}\n")
    (tools / "python3").chmod(0o755)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def start(root: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PATH": f"{root / 'tools'}:{os.environ['PATH']}",
           "CALLS": str(root / "calls"), "TMPDIR": str(root / "tmp")}  # fmt: skip
    return subprocess.Popen(
        ["bash", "tests/images/build-all.sh", *args], cwd=root, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def calls(root: Path) -> list[str]:
    return [" ".join(line.split()[:2]) for line in (root / "calls").read_text().splitlines()]


def test_an_early_run_ends_while_the_whole_build_still_builds_the_kits_image(tmp_path):
    root = tree(tmp_path)
    whole = start(root, "--force")
    time.sleep(1.5)  # the whole build is past the stand-ins, in the kit's image
    early = start(root, "--early")
    assert early.wait(timeout=30) == 0, early.stdout.read() if early.stdout else ""
    ended_early = calls(root)
    assert whole.wait(timeout=30) == 0
    assert "kit start" in ended_early and "kit end" not in ended_early
    # the early run found its images there: it built nothing of its own after its start
    assert calls(root).count("build-base start") == 2  # each run asks; the script caches


def test_an_early_run_waits_for_the_base_and_the_stand_ins_being_built(tmp_path):
    root = tree(tmp_path, kit_s=0.1)
    whole = start(root)
    time.sleep(0.1)  # the whole build holds the base's lock, in debootstrap
    early = start(root, "--early")
    assert early.wait(timeout=30) == 0 and whole.wait(timeout=30) == 0
    order = calls(root)
    # never two base builds or two stand-in builds at once: each starts after the other ends
    bases = [i for i, line in enumerate(order) if line.startswith("build-base")]
    assert [order[i] for i in bases] == ["build-base start", "build-base end"] * 2
    stands = [order[i] for i, line in enumerate(order) if line.startswith("standins")]
    assert stands == ["standins start", "standins end"] * 2


def test_an_unknown_option_is_one_line_and_builds_nothing(tmp_path):
    root = tree(tmp_path)
    done = start(root, "--debootstrap-only")
    assert done.wait(timeout=30) == 2
    assert done.stdout is not None
    assert done.stdout.read().strip().splitlines() == [
        "unknown option --debootstrap-only; fix: give --force, --early or nothing"
    ]
    assert not (root / "calls").exists()


def test_the_modules_that_start_no_kit_come_first_in_their_order():
    ids = ["tests/e2e/test_kit_watch.py::a", "tests/e2e/test_standin_images.py::b",
           "tests/e2e/test_kit_pull.py::c", "tests/e2e/test_kit_gpu_proofs.py::d",
           "tests/e2e/test_kit_gpu_proofs.py::e"]  # fmt: skip
    assert [ids[i][-1] for i in early_first(ids)] == ["b", "d", "e", "a", "c"]
    for name in EARLY:  # each names a module that exists and starts no kit
        text = (ROOT / "tests" / "e2e" / name).read_text()
        assert 'usefixtures("early_images")' in text
        assert not re.search(r"def \w+\([^)]*\bkit\b", text)  # no test asks for a kit
