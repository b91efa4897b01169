#!/bin/sh
# The NVIDIA workers' image (issue 39 §2): run by 03-agents/Dockerfile after the kit's own
# install, with the build arguments OCR_CUDA, ONNXRUNTIME_GPU and PIP_INSTALL_ARGS.
#
#   ocr-cuda.sh OCR_CUDA ONNXRUNTIME_GPU [PIP INSTALL ARGUMENTS...]
#
# OCR_CUDA=0 (the kit's image: brain, CPU and AMD/Intel workers) changes nothing. OCR_CUDA=1
# (AIRIG_IMAGE-cuda, which `up` builds for NVIDIA GPU workers only) puts onnxruntime-gpu
# where rapidocr-onnxruntime's CPU onnxruntime was, with NVIDIA's CUDA 12 and cuDNN 9
# runtime libraries as pip wheels (the `cuda` and `cudnn` extras), so a python:3.12-slim
# image needs no CUDA base image: `onnxruntime.preload_dlls()` (ocr_onnx.py) loads them
# from the venv's site-packages/nvidia before the first CUDA session. Upstream facts, and
# where they come from: docs/gpus-and-images.md, "OCR on the GPU".
#
# Any failure fails the build (set -e): an image that would run OCR on the CPU while
# claiming CUDA is never tagged.
set -eu

if [ "$#" -lt 2 ]; then
    echo "ocr-cuda.sh: usage: ocr-cuda.sh OCR_CUDA ONNXRUNTIME_GPU [PIP ARGS...]" >&2
    exit 2
fi
mode=$1
spec=$2
shift 2

case "$mode" in
    0) echo "ocr-cuda.sh: OCR_CUDA=0: the CPU onnxruntime stays"; exit 0 ;;
    1) ;;
    *)
        echo "ocr-cuda.sh: OCR_CUDA='$mode' is not 0 or 1 (1 = the NVIDIA workers' image)" >&2
        exit 2
        ;;
esac
case "$spec" in
    onnxruntime-gpu*) ;;
    *)
        echo "ocr-cuda.sh: ONNXRUNTIME_GPU='$spec' does not name onnxruntime-gpu" >&2
        exit 2
        ;;
esac

# Both distributions install the one `onnxruntime` module: the CPU one goes first, or the
# two overlap in site-packages (onnxruntime's print_debug_info warns of exactly that). pip
# then notes that rapidocr-onnxruntime asks for `onnxruntime`: the module is there, under
# the other distribution's name.
pip uninstall --yes onnxruntime
pip install --no-cache-dir "$@" "$spec"

# The build fails here, not a worker's first OCR task: the CUDA provider compiled in,
# preload_dlls there (onnxruntime >= 1.21), and built for CUDA 12 (what the extras bring
# and the driver ranges of docs/gpus-and-images.md assume). No GPU is needed for this.
python - <<'EOF'
import sys

import onnxruntime

providers = onnxruntime.get_available_providers()
cuda = str(getattr(onnxruntime, "cuda_version", "") or "")
problems = []
if "CUDAExecutionProvider" not in providers:
    problems.append(f"no CUDAExecutionProvider in {providers}")
if not callable(getattr(onnxruntime, "preload_dlls", None)):
    problems.append("no onnxruntime.preload_dlls (onnxruntime-gpu >= 1.21 has it)")
if cuda and cuda.split(".")[0] != "12":
    problems.append(f"built for CUDA {cuda}, not 12")
if problems:
    print(f"ocr-cuda.sh: onnxruntime {onnxruntime.__version__}: " + "; ".join(problems),
          file=sys.stderr)
    sys.exit(1)
print(f"ocr-cuda.sh: onnxruntime-gpu {onnxruntime.__version__} (CUDA {cuda or '?'}): {providers}")
EOF
