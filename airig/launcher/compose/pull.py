"""`up` pulls the images it does not build before it starts anything.

Left to `compose up`, a missing image is pulled silently in the middle of a stack's start
and a bad tag surfaces as "02-compute failed to start" after the other stacks came up.
Here each image the engine lacks is pulled first, through `docker compose pull` (the
compose files decide which images, AIRIG_IMAGE_REGISTRY where from), one image at a time
so a failure names its image: a missing tag or an unreachable registry is one line with
the fix, before any network, container or build. Images already present are not pulled
again (`pull_policy: missing`, Compose's default for `up`), so `up` works offline once
they are there.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from airig.common.errors import DockerError
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import ComposePlan
from airig.launcher.images import CATALOG_FILE, ImageSelection
from airig.launcher.images.registry import split_domain

# The daemon's words for each failure (moby's registry client and Go's net package, as
# `docker pull` prints them): "manifest for X not found: manifest unknown", `dial tcp
# …: connect: connection refused`, "lookup HOST …: no such host".
MISSING = ("manifest unknown", "not found")
UNREACHABLE = (
    "connection refused",
    "no such host",
    "i/o timeout",
    "network is unreachable",
    "no route to host",
    "tls handshake timeout",
)
DENIED = ("pull access denied", "unauthorized", "denied")
PLAIN_HTTP = "http response to https client"


def pull_missing(
    docker: Docker,
    plan: ComposePlan,
    images: ImageSelection | None,
    registry: str,
    console: Console,
) -> list[str]:
    """Pull every image of ``plan`` the engine lacks; returns those pulled. Compose's own
    lines show as a live status on a terminal; a failure raises one DockerError."""
    pulled = []
    for stack in plan.stacks:
        for service, image in docker.images_to_pull(stack):
            console.print(f"[bold]Pulling[/] {escape(image)} ({escape(service)}) …")
            try:
                with console.status(f"{escape(service)}: pulling …") as status:
                    for line in docker.pull_service(stack, service):
                        status.update(f"{escape(line.strip())}")
            except DockerError as exc:
                raise pull_error(image, service, exc.message, _variable(images, image),
                                 registry) from None  # fmt: skip
            console.print(f"  [green]✔[/] pulled {escape(image)}")
            pulled.append(image)
    return pulled


def pull_error(image: str, service: str, detail: str, variable: str, registry: str) -> DockerError:
    """One line naming the image and why, with the fix; ``detail``: Compose's failure."""
    host = split_domain(image)[0]
    text = detail.lower()
    where = f"{variable} in .env" if variable else f"the image of {service}"
    if any(words in text for words in UNREACHABLE):
        why = next(words for words in UNREACHABLE if words in text)
        fix = (
            f"start the registry at {registry}, or correct AIRIG_IMAGE_REGISTRY in .env "
            "(empty = each image's own registry)"
            if registry
            else f"check the network and DNS (try `docker pull {image}`), or set "
            "AIRIG_IMAGE_REGISTRY in .env to a mirror this machine reaches"
        )
        return DockerError(f"cannot pull {image}: the registry {host} is unreachable ({why})", fix)
    if PLAIN_HTTP in text:
        return DockerError(
            f"cannot pull {image}: the registry {host} answers plain HTTP",
            f'add "{host}" to "insecure-registries" in /etc/docker/daemon.json and restart '
            "Docker, or serve the registry over TLS",
        )
    if any(words in text for words in DENIED):
        return DockerError(
            f"cannot pull {image}: the registry {host} refused it (access denied)",
            f"run `docker login {host}`, or check the name in {where}",
        )
    if any(words in text for words in MISSING):
        fix = f"pin a tag that exists with {where} (empty = airig picks from {CATALOG_FILE})"
        if registry:
            fix = f"push {split_domain(image)[1]} to {registry}, or {fix}"
        return DockerError(f"cannot pull {image}: no such tag in {host} (manifest unknown)", fix)
    reason = detail.split(" failed: ", 1)[-1] or "no detail"  # docker_errors' "pulling X failed: "
    return DockerError(
        f"cannot pull {image}: {reason}", f"run `docker pull {image}` to see why, or fix {where}"
    )


def _variable(images: ImageSelection | None, image: str) -> str:
    """The .env variable that carries ``image`` (empty when none of the chosen does)."""
    if images is None:
        return ""
    chosen = [c.variable for c in images.choices if c.image == image]
    others = [name for name, value in images.env.items() if value == image]
    return next(iter(chosen + others), "")
