"""AIRIG_IMAGE_REGISTRY: every compute image pulled from one registry the user names.

A local mirror the user pushed to, or a pull-through cache, holds each image under its
upstream repository path: ``ollama/ollama:0.20.6`` becomes
``<registry>/ollama/ollama:0.20.6``, ``ghcr.io/speaches-ai/speaches:0.8.3-cpu`` becomes
``<registry>/speaches-ai/speaches:0.8.3-cpu``, a Docker Hub official image ``ubuntu:24.04``
becomes ``<registry>/library/ubuntu:24.04``. The registry host of the reference (implicit
``docker.io`` or explicit) is replaced; path, tag and digest are kept, so a digest pin
still pins. ``choose.py`` applies it last, so fit and pins are judged on the upstream
names: a pin is matched against the catalogue before it is rewritten.
"""

from __future__ import annotations

DOCKER_HUB = "docker.io"


def split_domain(image: str) -> tuple[str, str]:
    """(registry domain, repository path with tag/digest) of an image reference.

    The rule Docker uses to tell a registry host from a Docker Hub namespace
    (distribution/reference@4ca14034c40611bc3536fc703ffa6a22fb8e6659 normalize.go
    ``splitDockerDomain``): the first path element is a domain when it holds "." or ":",
    is ``localhost``, or is not lowercase; ``index.docker.io`` is Docker Hub; a Docker Hub
    name with no namespace is an official image under ``library/``."""
    first, slash, rest = image.partition("/")
    if not slash:
        return DOCKER_HUB, f"library/{image}"
    if first == "index.docker.io":
        domain, path = DOCKER_HUB, rest
    elif first == "localhost" or any(c in first for c in ".:") or first.lower() != first:
        domain, path = first, rest
    else:
        domain, path = DOCKER_HUB, image
    if domain == DOCKER_HUB and "/" not in path.split("@")[0]:
        path = f"library/{path}"
    return domain, path


def mirrored(image: str, registry: str) -> str:
    """``image`` as pulled from ``registry`` (host[:port][/path]); unchanged when no
    registry is set or the image already names it."""
    registry = registry.strip().rstrip("/")
    if not registry or not image or image.startswith(f"{registry}/"):
        return image
    return f"{registry}/{split_domain(image)[1]}"
