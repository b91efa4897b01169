"""01-infra's own services: lay out the shared volumes, and serve the data volume.

``python -m airig.infra prepare`` runs once as root: a fresh named volume is root-owned,
but speaches runs as uid 1000 and the kit's brain and workers as 10001, so each volume
gets the owner of the image that writes it (a classic source of "permission denied" in
peer kits). ``serve`` is an authenticated file service so users can put inputs (audio,
documents) on the volume the workers read and fetch what tasks wrote.
"""

# No `from __future__ import annotations`: FastAPI must resolve the route annotations,
# which are local to create_app().

import hmac
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Annotated

AIRIG_UID = 10001
WHISPER_UID = 1000  # speaches' "ubuntu" user
VOLUMES_ROOT = Path(os.environ.get("AIRIG_VOLUMES_ROOT", "/volumes"))
LAYOUT = {
    "data": (AIRIG_UID, ["inputs", "outputs"]),
    "results": (AIRIG_UID, []),
    "state": (AIRIG_UID, []),
    "whisper": (WHISPER_UID, []),
    "ollama": (0, ["models"]),
    "comfyui": (0, []),
}
PORT = 8090


def prepare(root: Path = VOLUMES_ROOT) -> list[str]:
    """Create the layout and fix ownership; idempotent. Returns what it did."""
    done = []
    for name, (uid, subdirs) in LAYOUT.items():
        volume = root / name
        if not volume.is_dir():
            continue
        for sub in subdirs:
            (volume / sub).mkdir(exist_ok=True)
        for path in [volume, *(volume / s for s in subdirs)]:
            if path.stat().st_uid != uid:
                os.chown(path, uid, uid)
                done.append(f"chown {uid} {path}")
    return done


def create_app():
    """The file service. Imported lazily so `prepare` needs no web stack."""
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import FileResponse
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    root = Path(os.environ.get("FILES_ROOT", "/data")).resolve()
    token = os.environ.get("BRAIN_ADMIN_TOKEN", "")
    if not token or token == "change-me":
        raise SystemExit("files: BRAIN_ADMIN_TOKEN is not set (run python start_services.py)")
    bearer = HTTPBearer()
    Credentials = Annotated[HTTPAuthorizationCredentials, Depends(bearer)]

    def authorised(cred: Credentials) -> None:
        if not hmac.compare_digest(cred.credentials.encode(), token.encode()):
            raise HTTPException(401, "invalid token")

    def resolve(rel: str) -> Path:
        path = (root / rel).resolve()
        if path != root and root not in path.parents:
            raise HTTPException(400, "path escapes the data volume")
        return path

    app = FastAPI(title="airig files", dependencies=[])

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "root": str(root)}

    @app.get("/files/{rel:path}", dependencies=[Depends(authorised)])
    def get(rel: str):
        path = resolve(rel)
        if path.is_dir():
            return {"path": rel, "entries": sorted(_entry(p) for p in path.iterdir())}
        if not path.is_file():
            raise HTTPException(404, f"no file {rel}")
        return FileResponse(path)

    @app.put("/files/{rel:path}", dependencies=[Depends(authorised)], status_code=201)
    async def put(rel: str, request: Request) -> dict:
        path = resolve(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        size = 0
        with partial.open("wb") as out:  # write aside, rename: readers never see half
            async for chunk in request.stream():
                out.write(chunk)
                size += len(chunk)
        partial.replace(path)
        return {"path": rel, "size": size}

    return app


def _entry(path: Path) -> tuple:
    return (path.name + ("/" if path.is_dir() else ""), path.stat().st_size)


def check(port: int = PORT) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=4) as r:
            return 0 if json.load(r).get("status") == "ok" else 1
    except OSError:
        return 1


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "prepare":
        for line in prepare():
            print(json.dumps({"event": "volume.prepare", "action": line}))
        print(json.dumps({"event": "volume.ready", "root": str(VOLUMES_ROOT)}))
        return 0
    if command == "serve":
        import uvicorn

        uvicorn.run(create_app(), host="0.0.0.0", port=PORT, log_level="warning")
        return 0
    if command == "check":
        return check()
    print("usage: python -m airig.infra prepare|serve|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
