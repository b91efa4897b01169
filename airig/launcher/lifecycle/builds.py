"""The images `up` builds before any stack starts, each failure said with its way around.

- the kit's image (AIRIG_IMAGE), from 03-agents' build: the brain's service, a joined
  rig's `worker-cpu` (it runs no brain);
- on gpu-nvidia with AIRIG_OCR_CUDA=on, the NVIDIA workers' image (AIRIG_IMAGE-cuda, the
  same build with OCR_CUDA=1: compose/gpu_workers.py), built once for every such worker;
- Ollama's Vulkan image (02-compute/ollama-vulkan/), before the Vulkan probe judges it.

Each kit image is rebuilt only when its own inputs changed: the source hash of what it is
built from, kept as an image label (image_source.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape

from airig.common.errors import DockerError
from airig.launcher.compose.docker import Docker, engine_errors
from airig.launcher.compose.gpu_workers import CUDA_BUILD_ARG, VULKAN_BUILD, cuda_image
from airig.launcher.compose.plan import ComposePlan, cuda_workers, vulkan_build
from airig.launcher.hardware.choice import Choice
from airig.launcher.lifecycle.comfy_volumes import COMPUTE_STACK
from airig.launcher.lifecycle.image_source import image_hash, source_hash
from airig.launcher.settings import Settings

# The service whose build: makes the kit's image; a joined rig has no brain, and its
# workers' build: is the same (the x-airig anchor).
IMAGE_SERVICE = ("03-agents", "brain")
JOINED_IMAGE_SERVICE = "worker-cpu"
# A failed build of the NVIDIA workers' image (03-agents/ocr-cuda.sh) and the way around it.
CUDA_BUILD_HINT = (
    "it downloads onnxruntime-gpu and NVIDIA's CUDA 12 / cuDNN 9 wheels from PyPI (or "
    "AIRIG_PIP_INSTALL_ARGS' index): check the network and free disk, or set "
    "AIRIG_OCR_CUDA=off in .env (NVIDIA workers then read OCR on the CPU)"
)


@dataclass
class ImageBuilds:
    """The builds of one `up`, through the launcher's Docker adapter and console."""

    settings: Settings
    docker: Docker
    console: Console

    def kit_images(self, plan: ComposePlan) -> None:
        """The kit's image, then the NVIDIA workers' image when the plan runs it."""
        args = {
            "AIRIG_BASE_IMAGE": self.settings.base_image,
            "AIRIG_PIP_INSTALL_ARGS": self.settings.pip_install_args,
        }
        self._build(plan, self.settings.image, image_service(plan), args, "the kit's image")
        workers = cuda_workers(plan)
        if not workers:  # not gpu-nvidia, no NVIDIA card, or AIRIG_OCR_CUDA=off
            return
        # The NVIDIA workers' image: the same sources, OCR_CUDA=1 (its own hash, so either
        # image is rebuilt only when its own inputs change). A failure stops `up` here,
        # before any stack starts, with the way to run without it.
        self._build(
            plan, cuda_image(self.settings.image), workers[0],
            {**args, CUDA_BUILD_ARG: "1"}, "the NVIDIA workers' image", CUDA_BUILD_HINT,
        )  # fmt: skip

    def _build(
        self, plan: ComposePlan, image: str, service: str, args: dict[str, str], what: str,
        hint: str = "",
    ) -> None:  # fmt: skip
        """Build ``service``'s image unless the engine has it with these inputs' hash;
        ``hint``: the fix a failed build is said with (else Compose's)."""
        wanted = source_hash(self.settings.root, args)
        with engine_errors(f"inspecting the image {image}"):
            built = image_hash(self.docker.sdk(), image)
        if built == wanted:
            return
        self.console.print(f"[bold]Building[/] {what} {escape(image)} …")
        try:
            self.docker.build(
                plan.stack(IMAGE_SERVICE[0]), [service], {"AIRIG_SOURCE_HASH": wanted}
            )
        except DockerError as exc:
            raise DockerError(exc.message, hint or exc.hint) from None

    def vulkan(self, choice: Choice) -> None:
        """Ollama's Vulkan image, when the choice runs Ollama on Vulkan (its base pulled
        first when the engine lacks it)."""
        vulkan = vulkan_build(self.settings, choice.profile, choice.images)
        if vulkan is None:
            return
        if not self.docker.has_image(vulkan.base):
            self.console.print(f"[bold]Pulling[/] {escape(vulkan.base)} (Ollama's Vulkan base) …")
            self.docker.pull_image(vulkan.base)
        self.console.print(
            f"[bold]Building[/] {escape(vulkan.image)} (Ollama with Mesa's Vulkan) …"
        )
        context = self.settings.root / COMPUTE_STACK / VULKAN_BUILD
        hint = (
            f"check this machine reaches Ubuntu's package archive ({context.name}/Dockerfile "
            "installs Mesa from it), or set OLLAMA_BACKEND=cpu in .env"
        )
        self.docker.build_image(context, vulkan.image, {"OLLAMA_BASE": vulkan.base}, hint)

    def commands(self, plan: ComposePlan) -> list[str]:
        """The build commands `up` runs (for --dry-run), each only when its sources changed."""
        build = plan.stack(IMAGE_SERVICE[0])
        lines = [
            self.docker.command(
                build,
                "build",
                "--quiet",
                "--build-arg",
                "AIRIG_SOURCE_HASH=<hash>",
                image_service(plan),
            )
            + "   # only when the sources changed"
        ]
        workers = cuda_workers(plan)
        if workers:  # one build serves every NVIDIA worker: they share the image
            lines.append(
                self.docker.command(
                    build,
                    "build",
                    "--quiet",
                    "--build-arg",
                    "AIRIG_SOURCE_HASH=<hash>",
                    workers[0],
                )
                + f"   # {cuda_image(self.settings.image)}, the NVIDIA workers' "
                f"({CUDA_BUILD_ARG}=1), only when the sources changed"
            )
        return lines


def image_service(plan: ComposePlan) -> str:
    """The service whose build makes the kit's image on this rig."""
    return JOINED_IMAGE_SERVICE if plan.join_brain_url else IMAGE_SERVICE[1]
