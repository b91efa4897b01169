"""ComfyUI's main.py in the stand-in's bundle: the image runs `./ComfyUI/main.py` from
/root after the entrypoint copied the bundle there, so the code that runs is whatever
/root/ComfyUI holds, as with yanwk/comfyui-boot. The tree it serves is its own folder,
as ComfyUI's models/, input/, output/ are beside its main.py (folder_paths.py base_path).
"""

import os
from pathlib import Path

os.environ.setdefault("STANDIN_COMFYUI_ROOT", str(Path(__file__).resolve().parent))

from server import main  # noqa: E402 - after the default root is set

main()
