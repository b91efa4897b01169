#!/bin/bash
# Starts the stand-in as yanwk/comfyui-boot's runner-scripts/entrypoint.sh starts ComfyUI
# (cpu/, cu130-slim-v2/, rocm7/ of YanWenKun/ComfyUI-Docker):
# 1. copy the image's bundled ComfyUI into /root/ComfyUI only when
#    /root/ComfyUI/main.py is missing (an existing copy is used as it is, whatever image
#    runs now: "Using existing ComfyUI in user storage...");
# 2. the user's /root/user-scripts/pre-start.sh, if there is one;
# 3. python3 ./ComfyUI/main.py --listen --port 8188 ${CLI_ARGS} from /root, CLI_ARGS
#    unquoted (split on spaces) and last, so it can add or override flags.
# No `exec`, as upstream: bash stays PID 1 and python is its child. Without `init: true`
# a stop's SIGTERM reaches a PID 1 with no handler for it, is dropped, and the stop ends
# with SIGKILL after the timeout (exit 137); with it, tini passes SIGTERM to bash.
# STANDIN_HOME and STANDIN_BUNDLE (the bundled ComfyUI folder) let tests run it on the host.
set -e
bundle="${STANDIN_BUNDLE:-/default-comfyui-bundle/ComfyUI}"
cd "${STANDIN_HOME:-/root}"
if [ ! -f ./ComfyUI/main.py ]; then
    mkdir -p ./ComfyUI
    # upstream: cp --archive --update=none (coreutils >= 9.2); -n is the same "never
    # overwrite" on the stand-in's Debian 12 (coreutils 9.1)
    if cp --archive -n "$bundle/." ./ComfyUI/; then
        echo "[INFO] Setting up ComfyUI..."
        echo "[INFO] Using image-bundled ComfyUI (copied to workdir)."
    else
        echo "[ERROR] Failed to copy ComfyUI bundle to '$PWD/ComfyUI'" >&2
        exit 1
    fi
else
    echo "[INFO] Using existing ComfyUI in user storage..."
fi
if [ -f ./user-scripts/pre-start.sh ]; then
    echo "[INFO] Running pre-start script..."
    # shellcheck disable=SC1091
    source ./user-scripts/pre-start.sh
fi
echo "[INFO] Starting ComfyUI..."
# shellcheck disable=SC2086
python3 ./ComfyUI/main.py --listen --port 8188 ${CLI_ARGS}
