"""Identify the kit's image by what it is built from, so `up` rebuilds only on change.

Docker's build cache is not a guarantee (some engines rebuild every time, giving a new
image id, which makes Compose recreate every container); a hash of the build inputs
stored as an image label is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

LABEL = "org.airig.source-hash"
INPUTS = (
    "03-agents/Dockerfile",
    "03-agents/ocr-cuda.sh",  # the NVIDIA workers' swap (OCR_CUDA=1)
    "pyproject.toml",
    "README.md",
    ".dockerignore",
)


def source_hash(root: Path, build_args: dict[str, str]) -> str:
    digest = hashlib.sha256()
    files = [root / name for name in INPUTS]
    files += sorted(
        p for p in (root / "airig").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    wheels = root / "03-agents" / "wheels"
    if wheels.is_dir():  # names carry versions: enough to notice a changed wheelhouse
        digest.update("\n".join(sorted(p.name for p in wheels.iterdir())).encode())
    for key in sorted(build_args):
        digest.update(f"{key}={build_args[key]}\n".encode())
    return digest.hexdigest()[:16]


def image_hash(sdk: Any, image: str) -> str | None:
    """The source hash the local image was built from; None when absent or unlabelled."""
    import docker.errors

    try:
        label = (sdk.images.get(image).labels or {}).get(LABEL)
    except docker.errors.ImageNotFound:
        return None
    return None if label is None else str(label)
