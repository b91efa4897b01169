"""Model provisioning that proves what it pulled.

The init containers run ``python -m airig.provision <ollama|whisper|comfyui>``; the host
CLI (``airig.launcher.cli.models``) runs the same entry point in one-off containers to list,
verify or re-pull models of the running stack.
"""
