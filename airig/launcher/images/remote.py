"""What a tag names in its registry now: the digest and the build date (`update --check`).

The registry HTTP API v2 (distribution spec): ``GET /v2/<repo>/manifests/<tag>`` with
every manifest type in Accept, so the registry answers with the manifest it stores and
``Docker-Content-Digest`` is the digest `docker pull` records (an index's for a multi-arch
tag); then the config blob of the linux/amd64 (or only) manifest for ``created``. A
registry that wants a token (Docker Hub, ghcr.io) says so in ``WWW-Authenticate``; an
anonymous token is fetched from the realm it names. Plain HTTP only for loopback hosts,
as Docker allows them without configuration.
"""

from __future__ import annotations

import hashlib
import ipaddress
import platform
import re
from collections.abc import Callable
from typing import Any

import requests

from airig.common.errors import DockerError
from airig.launcher.images.lock import DIGEST_WORDS, is_digest
from airig.launcher.images.registry import DOCKER_HUB, split_domain

TIMEOUT_S = 10.0
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "amd64")

Getter = Callable[..., requests.Response]
# A build time as registries write it (2026-11-20T03:12:09.123456789Z); anything else is
# not shown (it is printed and stored in the lock: a registry's text is not trusted)
CREATED = re.compile(r"\d{4}-\d{2}-\d{2}T[0-9:.]{1,40}(Z|[+-]\d{2}:?\d{2})?")
# A bearer token goes into a request header: visible ASCII only, of a sane length
CHALLENGE_MAX = 4096  # a WWW-Authenticate header worth parsing
TOKEN = re.compile(r"[\x21-\x7e]{1,16384}")


def parse(ref: str) -> tuple[str, str, str]:
    """(API host, repository path, tag or digest) of an image reference."""
    domain, path = split_domain(ref)
    if "@" in path:
        repo, reference = path.split("@", 1)
    else:
        head, slash, last = path.rpartition("/")
        name, _, tag = last.partition(":")
        repo, reference = f"{head}{slash}{name}", tag or "latest"
    host = "registry-1.docker.io" if domain == DOCKER_HUB else domain
    return host, repo, reference


def scheme_of(host: str) -> str:
    """http for a loopback registry (Docker's default insecure range), else https."""
    name = host[1:].split("]")[0] if host.startswith("[") else host.split(":")[0]
    if name == "localhost":
        return "http"
    try:
        return "http" if ipaddress.ip_address(name).is_loopback else "https"
    except ValueError:
        return "https"


class Registry:
    """One lookup session; ``get`` is requests.get (a fake in the tests)."""

    def __init__(self, get: Getter = requests.get) -> None:
        self._get = get
        self._tokens: dict[str, str] = {}

    def lookup(self, ref: str) -> tuple[str, str]:
        """(digest, created) of ``ref`` now; one DockerError line when the registry is
        down or the tag is gone."""
        host, repo, reference = parse(ref)
        base = f"{scheme_of(host)}://{host}/v2/{repo}"
        answer = self._fetch(ref, host, f"{base}/manifests/{reference}", ACCEPT)
        if answer.status_code == 404:
            raise DockerError(
                f"cannot check {ref}: no such tag in {host} (manifest unknown)",
                "the tag vanished upstream: pin one that exists in .env, or keep the locked "
                "image (nothing was changed)",
            )
        if answer.status_code != 200:
            raise DockerError(
                f"cannot check {ref}: the registry {host} answered HTTP {answer.status_code}",
                f"try `docker pull {ref}` to see why; nothing was changed",
            )
        digest = answer.headers.get("Docker-Content-Digest") or (
            "sha256:" + hashlib.sha256(answer.content).hexdigest()
        )
        if not is_digest(digest):
            # it would be printed, locked and written into host.env: refused, never quoted
            raise DockerError(
                f"cannot check {ref}: the registry {host} answered a Docker-Content-Digest "
                f"header that is not {DIGEST_WORDS}",
                "the registry (or a proxy in front of it) is broken or not a registry: "
                "check AIRIG_IMAGE_REGISTRY in .env; nothing was changed",
            )
        return digest, self._created(ref, host, base, answer)

    def _created(self, ref: str, host: str, base: str, answer: requests.Response) -> str:
        """The image's build time from its config blob; "" when the registry will not
        say (the digest alone decides whether a tag moved)."""
        try:
            manifest = answer.json()
            if manifest.get("manifests"):
                chosen = _platform_manifest(manifest["manifests"])
                sub = self._fetch(ref, host, f"{base}/manifests/{_digest(chosen)}", ACCEPT)
                manifest = sub.json()
            config = _digest(manifest["config"]["digest"])
            blob = self._fetch(ref, host, f"{base}/blobs/{config}", "*/*")
            created = blob.json().get("created", "") if blob.status_code == 200 else ""
            return created if isinstance(created, str) and CREATED.fullmatch(created) else ""
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return ""

    def _fetch(self, ref: str, host: str, url: str, accept: str) -> requests.Response:
        headers = {"Accept": accept}
        try:
            if host in self._tokens:
                headers["Authorization"] = f"Bearer {self._tokens[host]}"
            answer = self._get(url, headers=headers, timeout=TIMEOUT_S)
            if answer.status_code == 401 and host not in self._tokens:
                self._tokens[host] = self._token(answer.headers.get("WWW-Authenticate", ""))
                headers["Authorization"] = f"Bearer {self._tokens[host]}"
                answer = self._get(url, headers=headers, timeout=TIMEOUT_S)
            return answer
        except requests.ConnectionError as exc:
            raise DockerError(
                f"cannot check {ref}: the registry {host} is unreachable ({_why(exc)})",
                "start the registry or check the network (AIRIG_IMAGE_REGISTRY in .env names "
                "a mirror); nothing was changed",
            ) from None
        except requests.RequestException as exc:
            raise DockerError(
                f"cannot check {ref}: {type(exc).__name__} talking to {host}",
                "check the network and try again; nothing was changed",
            ) from None

    def _token(self, challenge: str) -> str:
        """An anonymous bearer token from the realm a 401 names (Docker Hub, ghcr.io)."""
        if len(challenge) > CHALLENGE_MAX:
            return ""  # no registry sends that much; parsing it would take minutes
        fields = dict(re.findall(r'(?<!\w)(\w+)="([^"]*)"', challenge))
        realm = fields.pop("realm", "")
        if not challenge.lower().startswith("bearer") or not realm:
            return ""
        answer = self._get(realm, params=fields, timeout=TIMEOUT_S)
        if answer.status_code != 200:
            return ""
        try:
            body = answer.json()
        except ValueError:
            return ""  # not a token answer: the retried request says the registry's 401
        if not isinstance(body, dict):
            return ""
        token = body.get("token") or body.get("access_token") or ""
        return token if isinstance(token, str) and TOKEN.fullmatch(token) else ""


def _platform_manifest(manifests: list[dict[str, Any]]) -> str:
    for entry in manifests:
        plat = entry.get("platform") or {}
        if plat.get("os") == "linux" and plat.get("architecture") == ARCH:
            return str(entry["digest"])
    return str(manifests[0]["digest"])


def _digest(value: object) -> str:
    """A digest a manifest names, before it goes into a URL; else ValueError (no build
    date: the digest in the header alone decides whether a tag moved)."""
    if not is_digest(value):
        raise ValueError("not a digest")
    return str(value)


def _why(exc: Exception) -> str:
    text = str(exc).lower()
    for words in ("connection refused", "name or service not known", "timed out", "no route"):
        if words in text:
            return words
    return type(exc).__name__
