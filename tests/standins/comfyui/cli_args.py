"""ComfyUI's command line, as the stand-in parses it.

Upstream (Comfy-Org/ComfyUI comfy/cli_args.py, read at commit 03294572) builds one argparse
parser and calls parse_args(): an unknown flag, a flag missing its value or two flags of
one mutually exclusive group (e.g. --cpu with --lowvram) end ComfyUI at start with
argparse's usage error and exit code 2. The flag names, value kinds and groups below are
that file's; help texts and behaviour behind most flags are not reproduced. `--root` is
the stand-in's own (where its fake ComfyUI tree lives; upstream: --base-directory).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

# flags that take no value (action="store_true"), outside the exclusive groups below
SWITCHES = [
    "date-based-output",
    "auto-launch",
    "disable-auto-launch",
    "cpu-vae",
    "fp16-intermediates",
    "force-channels-last",
    "supports-fp8-compute",
    "enable-triton-backend",
    "disable-triton-backend",
    "disable-xformers",
    "enable-manager",
    "disable-nvml-pressure",
    "disable-async-offload",
    "disable-dynamic-vram",
    "enable-dynamic-vram",
    "fast-disk",
    "disable-fast-disk",
    "disable-cuda-graphs",
    "disable-comfy-compiler",
    "assert-graph-breaks",
    "force-non-blocking",
    "disable-smart-memory",
    "deterministic",
    "debug-hang",
    "disable-pinned-memory",
    "mmap-torch-files",
    "disable-mmap",
    "dont-print-server",
    "quick-test-for-ci",
    "windows-standalone-build",
    "disable-metadata",
    "disable-all-custom-nodes",
    "disable-partner-nodes",
    "offline",
    "disable-api-nodes",
    "multi-user",
    "log-stdout",
    "enable-compress-response-body",
    "disable-assets",
    "enable-assets",
    "enable-asset-hashing",
    "list-feature-flags",
]
# mutually exclusive groups of switches (cm_group, fp_group, fpunet_group, fpvae_group,
# fpte_group, attn_group, upcast, manager_group, vram_group)
EXCLUSIVE = [
    "cuda-malloc disable-cuda-malloc",
    "force-fp32 force-fp16",
    "fp32-unet fp64-unet bf16-unet fp16-unet fp8_e4m3fn-unet fp8_e5m2-unet fp8_e8m0fnu-unet",
    "fp16-vae fp32-vae bf16-vae",
    "fp8_e4m3fn-text-enc fp8_e5m2-text-enc fp16-text-enc fp32-text-enc bf16-text-enc",
    "use-split-cross-attention use-quad-cross-attention use-pytorch-cross-attention "
    "use-sage-attention use-flash-attention use-ck-attention",
    "force-upcast-attention dont-upcast-attention",
    "disable-manager-ui enable-manager-legacy-ui",
    "gpu-only highvram lowvram novram cpu",
]
# flags that take one value, by type
VALUES: dict[str, type] = {
    "tls-keyfile": str,
    "tls-certfile": str,
    "max-upload-size": float,
    "base-directory": str,
    "output-directory": str,
    "date-output-format": str,
    "temp-directory": str,
    "input-directory": str,
    "cuda-device": str,
    "default-device": int,
    "oneapi-device-selector": str,
    "preview-size": int,
    "reserve-vram": float,
    "vram-headroom": float,
    "disabled-nodes-config": str,
    "front-end-version": str,
    "front-end-root": str,
    "user-directory": str,
    "models-directory": str,
    "comfy-api-base": str,
    "database-url": str,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="main.py")
    parser.add_argument("--listen", default="127.0.0.1", nargs="?", const="0.0.0.0,::")
    parser.add_argument("--port", type=int, default=8188)
    parser.add_argument("--enable-cors-header", default=None, nargs="?", const="*")
    parser.add_argument("--directml", type=int, nargs="?", const=-1)
    parser.add_argument("--async-offload", type=int, nargs="?", const=2)
    parser.add_argument("--extra-model-paths-config", nargs="+", action="append")
    parser.add_argument("--whitelist-custom-nodes", nargs="+", default=[])
    parser.add_argument("--feature-flag", action="append", default=[])
    parser.add_argument("--verbose", nargs="*", action="append", default=[])
    parser.add_argument("--fast", nargs="*")
    parser.add_argument("--preview-method", choices=["none", "auto", "latent2rgb", "taesd"])
    parser.add_argument("--default-hashing-function", choices=["md5", "sha1", "sha256", "sha512"])
    cache = parser.add_mutually_exclusive_group()  # cache_group
    cache.add_argument("--cache-ram", nargs="*", type=float, default=[])
    cache.add_argument("--cache-classic", action="store_true")
    cache.add_argument("--cache-lru", type=int, default=0)
    cache.add_argument("--cache-none", action="store_true")
    cache.add_argument("--high-ram", action="store_true")
    for name in SWITCHES:
        parser.add_argument(f"--{name}", action="store_true")
    for group in EXCLUSIVE:
        exclusive = parser.add_mutually_exclusive_group()
        for name in group.split():
            exclusive.add_argument(f"--{name}", action="store_true")
    for name, kind in VALUES.items():
        parser.add_argument(f"--{name}", type=kind)
    default_root = os.environ.get("STANDIN_COMFYUI_ROOT", "/root/ComfyUI")
    parser.add_argument("--root", type=Path, default=Path(default_root))
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    """parse_args(): exits 2 with argparse's usage error as ComfyUI does."""
    return build_parser().parse_args(argv)
