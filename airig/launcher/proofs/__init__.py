"""Proof on the host: a GPU image is relied on only after it has run on the GPU (issue 34).

``02-compute/images.yaml`` says which image *should* run on a GPU, from upstream's files;
upstream keeps proving such tables wrong (a driver floor that moved, compat libraries a
GeForce cannot use). So, after the images are pulled and before the stack starts, `up`
runs a short proof in the exact image, with the devices, groups and environment Compose
will give the service, once per distinct (image, GPU model, driver):

- ``scripts.py``: what runs in the container (CTranslate2 + one CUDA op for Whisper,
  PyTorch + one op for ComfyUI, Ollama's own GPU discovery);
- ``judge.py``: the container's exit and words → a verdict that quotes the failure as
  upstream prints it (error 804, "device kernel image is invalid" …) and names the fix;
- ``run.py``: the container itself (never pulls, always removed, a hang is a timeout);
- ``cache.py``: ``.airig/proofs.json``, one verdict per (image id, GPU, driver), so a
  second `up` runs no proof;
- ``settle.py``: a failed proof moves the service to the next image of the catalogue
  that fits (the CPU image last); a pin that fails stops `up` with the quote.
"""
