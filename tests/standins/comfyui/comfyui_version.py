# ComfyUI's comfyui_version.py (read by server.py's /system_stats). The stand-in image
# overwrites it with its COMFYUI_VERSION build argument, so a test can tell which
# image's bundled code is running.
__version__ = "0.28.0"
