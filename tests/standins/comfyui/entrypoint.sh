#!/bin/bash
# Starts the stand-in as yanwk/comfyui-boot's runner-scripts/entrypoint.sh starts ComfyUI
# (cpu/, cu130-slim-v2/, rocm7/ of YanWenKun/ComfyUI-Docker): from /root, the user's
# pre-start script if there is one, then
#   python3 ./ComfyUI/main.py --listen --port 8188 ${CLI_ARGS}
# with CLI_ARGS unquoted (split on spaces) and last, so it can add or override flags.
# One difference: `exec`, so the server is PID 1 and stops on SIGTERM (upstream's python
# is a child of bash). --root is the stand-in's own flag (its fake ComfyUI tree).
set -e
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "${STANDIN_HOME:-/root}"
if [ -f ./user-scripts/pre-start.sh ]; then
    echo "[INFO] Running pre-start script..."
    # shellcheck disable=SC1091
    source ./user-scripts/pre-start.sh
fi
echo "[INFO] Starting ComfyUI..."
# shellcheck disable=SC2086
exec python3 "$here/server.py" --root "${STANDIN_COMFYUI_ROOT:-/root/ComfyUI}" \
    --listen --port 8188 ${CLI_ARGS}
