"""What each proof runs inside the service's own image.

A script proof prints ``AIRIG-PROOF OK …`` as its last act and exits 0; anything else is
a failure, judged on the words the image printed (``judge.py``). The scripts use only
the standard library besides the framework the image ships (CTranslate2, PyTorch), so
they run on the Python of any of the catalogue's images.

Ollama has no Python: its proof is ``ollama serve`` itself, read until its GPU discovery
logs ``msg="inference compute"`` (one line per device it will use, ``library=cpu`` when
none; discover/types.go in ollama/ollama) or says "no compatible GPUs were discovered".
"""

from __future__ import annotations

from dataclasses import dataclass, field

OK_MARK = "AIRIG-PROOF OK"
FAIL_MARK = "AIRIG-PROOF FAIL"
NOT_RUN_MARK = "AIRIG-PROOF NOT-RUN"
NOT_RUN_EXIT = 97
# The images name their interpreter differently (a venv's python, the distribution's
# python3): a POSIX shell finds one; an image with neither is not judged, never failed.
PYTHON_SHIM = (
    'p="$(command -v python3 || command -v python)" || '
    f'{{ echo "{NOT_RUN_MARK} the image has no python3 or python"; exit {NOT_RUN_EXIT}; }}; '
    'exec "$p" "$@"'
)
# Ollama's discovery line (server log, slog text handler)
INFERENCE_COMPUTE = 'msg="inference compute"'

# CTranslate2 reports a failed cudaGetDeviceCount as 0 devices (its get_gpu_count swallows
# the error), so CUDA's own words are asked of the CUDA runtime the image ships first: a
# context on device 0 is where compat libraries fail (error 804 on a GeForce). Then
# CTranslate2's own CUDA path (get_supported_compute_types reads the device's properties),
# then one small operation on the device (alloc, memset, copy back, compare).
WHISPER_SCRIPT = r"""
import ctypes, sys
def fail(what):
    print("AIRIG-PROOF FAIL " + what, flush=True)
    sys.exit(1)
try:
    import ctranslate2
except Exception as exc:
    fail("import ctranslate2: %s" % exc)
rt = None
for name in ("libcudart.so.12", "libcudart.so.13", "libcudart.so"):
    try:
        rt = ctypes.CDLL(name)
        break
    except OSError:
        pass
def check(rc, call):
    if rc != 0:
        rt.cudaGetErrorName.restype = ctypes.c_char_p
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        fail("%s: CUDA error %d %s: %s" % (call, rc, rt.cudaGetErrorName(rc).decode(),
                                          rt.cudaGetErrorString(rc).decode()))
if rt is not None:
    count = ctypes.c_int(0)
    check(rt.cudaGetDeviceCount(ctypes.byref(count)), "cudaGetDeviceCount")
    check(rt.cudaSetDevice(0), "cudaSetDevice")
    check(rt.cudaFree(ctypes.c_void_p(0)), "cudaFree(0)")
n = ctranslate2.get_cuda_device_count()
if n < 1:
    fail("CTranslate2 %s sees no CUDA device (get_cuda_device_count() = %d)"
         % (ctranslate2.__version__, n))
types = sorted(ctranslate2.get_supported_compute_types("cuda", 0))
if rt is not None:
    size = 1 << 20
    ptr = ctypes.c_void_p()
    check(rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size)), "cudaMalloc")
    check(rt.cudaMemset(ptr, 7, ctypes.c_size_t(size)), "cudaMemset")
    back = (ctypes.c_ubyte * size)()
    check(rt.cudaMemcpy(back, ptr, ctypes.c_size_t(size), 2), "cudaMemcpy")
    check(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    rt.cudaFree(ptr)
    if any(b != 7 for b in back[:4096]):
        fail("the GPU returned wrong bytes from a 1 MiB memset")
print("AIRIG-PROOF OK CTranslate2 %s: %d CUDA device(s), compute types %s"
      % (ctranslate2.__version__, n, ",".join(types)), flush=True)
"""

# torch.cuda serves CUDA and ROCm (HIP) builds alike; torch.xpu the Intel builds. The
# operation is where "no kernel image is available for execution on the device" shows.
COMFYUI_SCRIPT = r"""
import sys
def fail(what):
    print("AIRIG-PROOF FAIL " + what, flush=True)
    sys.exit(1)
backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"
try:
    import torch
except Exception as exc:
    fail("import torch: %s" % exc)
device = "xpu" if backend == "xpu" else "cuda"
api = getattr(torch, device, None)
if api is None or not api.is_available():
    fail("PyTorch %s sees no GPU: torch.%s.is_available() is False (cuda %s, hip %s)"
         % (torch.__version__, device, torch.version.cuda, getattr(torch.version, "hip", None)))
try:
    x = torch.arange(1024, dtype=torch.float32, device=device)
    total = float((x * 2).sum().item())
    api.synchronize()
except Exception as exc:
    fail("one operation on %s: %s" % (device, exc))
if total != 1047552.0:
    fail("one operation on %s gave %s, not 1047552" % (device, total))
print("AIRIG-PROOF OK PyTorch %s on %s" % (torch.__version__, api.get_device_name(0)), flush=True)
"""


@dataclass(frozen=True)
class ProofSpec:
    """One proof: the container's entrypoint and command, its extra environment, and for a
    server (Ollama) the log text that ends the wait (``until``), else its exit."""

    service: str
    entrypoint: tuple[str, ...]
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    until: str = ""  # a server's proof: read its log until this appears (or it exits)
    what: str = ""  # what it runs, in words (detect, the closing note)


def spec_for(service: str, backend: str, env: dict[str, str] | None = None) -> ProofSpec | None:
    """The proof of ``service`` on ``backend`` (cuda, rocm, xpu); None: no proof applies
    (Ollama on Vulkan: vulkaninfo in its image is that proof, hardware/vulkan.py)."""
    env = dict(env or {})
    if service == "whisper" and backend == "cuda":
        what = "CTranslate2 sees the GPU; a CUDA context, a 1 MiB memset and copy"
        return ProofSpec(service, _python("-c", WHISPER_SCRIPT), (), env, what=what)
    if service == "comfyui" and backend in ("cuda", "rocm", "xpu"):
        what = f"PyTorch initialises {backend} and sums 1024 floats on it"
        return ProofSpec(service, _python("-c", COMFYUI_SCRIPT, backend), (), env, what=what)
    if service == "ollama" and backend in ("cuda", "rocm"):
        # loopback only: the proof container has no network, and no client needs it
        env.setdefault("OLLAMA_HOST", "127.0.0.1:11434")
        return ProofSpec(service, ("/bin/ollama",), ("serve",), env, until=INFERENCE_COMPUTE,
                         what="ollama serve's GPU discovery (inference compute lines)")  # fmt: skip
    return None


def _python(*args: str) -> tuple[str, ...]:
    """An entrypoint that runs the image's Python with ``args`` (``sh -c SHIM proof …``)."""
    return ("/bin/sh", "-c", PYTHON_SHIM, "proof", *args)
