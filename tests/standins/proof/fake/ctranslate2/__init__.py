"""A fake CTranslate2 for the proof tests. FAKE_CT2_DEVICES: what get_cuda_device_count()
answers (CTranslate2's get_gpu_count returns 0 when cudaGetDeviceCount fails)."""

import os

__version__ = "4.5.0"


def get_cuda_device_count():
    return int(os.environ.get("FAKE_CT2_DEVICES", "1"))


def get_supported_compute_types(device, index=0):
    return {"float32", "int8", "int8_float32"}
