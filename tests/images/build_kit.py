"""Builds the kit's own image for the e2e tests, once, before their kits start.

Each e2e kit's `up` would build it on first use (airig/launcher/lifecycle/builds.py,
`ImageBuilds.kit_images`), and that build (about a minute of CPU) sat in the first e2e
module's setup, on the run's critical path and once per lane of kits started together.
Built here ahead of them (.ci/run in the background beside the unit tests, or the e2e
fixture `test_images`), with the label `up` checks (`image_source.source_hash` of the
same sources and build arguments the kits' `.env` gives): their `up` then finds it current
and builds nothing.

Usage: python3 tests/images/build_kit.py   (a no-op when the image is current)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT_IMAGE = "airig/airig:e2e"
BASE_IMAGE = os.environ.get("AIRIG_TEST_BASE_IMAGE", "airig-test/base:bookworm")
# the wheelhouse (tests/images/wheelhouse.sh), copied into the build at /tmp/wheels
PIP_INSTALL_ARGS = "--no-index --find-links /tmp/wheels"


def build_args() -> dict[str, str]:
    """The build arguments as the kit's settings name them (what `.env` says)."""
    return {"AIRIG_BASE_IMAGE": BASE_IMAGE, "AIRIG_PIP_INSTALL_ARGS": PIP_INSTALL_ARGS}


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from airig.launcher.lifecycle.image_source import LABEL, source_hash

    wanted = source_hash(ROOT, build_args())
    label = f'{{{{ index .Config.Labels "{LABEL}" }}}}'
    have = subprocess.run(
        ["docker", "image", "inspect", "-f", label, KIT_IMAGE],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if have == wanted:
        print(f"kit image {KIT_IMAGE} already current")
        return 0
    args = build_args()
    done = subprocess.run(
        [
            "docker",
            "build",
            "-q",
            "-f",
            "03-agents/Dockerfile",
            "-t",
            KIT_IMAGE,
            "--build-arg",
            f"BASE_IMAGE={args['AIRIG_BASE_IMAGE']}",
            "--build-arg",
            f"PIP_INSTALL_ARGS={args['AIRIG_PIP_INSTALL_ARGS']}",
            "--build-arg",
            f"AIRIG_SOURCE_HASH={wanted}",
            ".",
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        print(f"building {KIT_IMAGE} failed", file=sys.stderr)
        return 1
    print(f"built kit image {KIT_IMAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
