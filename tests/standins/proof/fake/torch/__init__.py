"""A fake PyTorch for the proof tests. FAKE_TORCH: ok | no_kernel | no_gpu | hang | crash.

The words are PyTorch's own: c10/cuda/CUDAException "CUDA error: no kernel image is
available for execution on the device" (cudaErrorNoKernelImageForDevice's string), and
torch.cuda.is_available()'s warning on a failed cudaGetDeviceCount ("CUDA initialization:
Unexpected error from cudaGetDeviceCount() ... Error 804: forward compatibility was
attempted on non supported HW", torch/cuda/__init__.py).
"""

import os
import sys
import time
import warnings

MODE = os.environ.get("FAKE_TORCH", "ok")
__version__ = "2.9.1+cu126"
if MODE == "hang":
    time.sleep(3600)
if MODE == "crash":
    os.abort()


class _Version:
    cuda = "12.6"
    hip = None


version = _Version()
float32 = "float32"


class _Tensor:
    def __init__(self, values):
        self.values = values

    def __mul__(self, k):
        if MODE == "no_kernel":
            raise RuntimeError(
                "CUDA error: no kernel image is available for execution on the device\n"
                "CUDA kernel errors might be asynchronously reported at some other API call"
            )
        return _Tensor([v * k for v in self.values])

    def sum(self):
        return _Tensor([sum(self.values)])

    def item(self):
        return self.values[0]


def arange(n, dtype=None, device=None):
    return _Tensor([float(i) for i in range(n)])


class cuda:  # noqa: N801 - the module's name upstream
    @staticmethod
    def is_available():
        if MODE == "no_gpu":
            warnings.warn(
                "CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run "
                "some cuda functions before calling NumCudaDevices() that might have already "
                "set an error? Error 804: forward compatibility was attempted on non "
                "supported HW",
                stacklevel=1,
            )
            return False
        return True

    @staticmethod
    def synchronize():
        return None

    @staticmethod
    def get_device_name(index):
        return "NVIDIA GeForce GTX 1060 6GB"


sys.modules["torch.cuda"] = cuda  # type: ignore[assignment]
