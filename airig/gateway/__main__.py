"""``python -m airig.gateway`` serves the gateway; ``--check`` is the container healthcheck
(0 when it answers /health with a key loaded)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from pydantic import ValidationError

from airig.common.errors import AirigError
from airig.common.jsonlog import setup_json_logging
from airig.gateway.settings import GatewaySettings, load_key

if TYPE_CHECKING:
    # failures.py imports the provider SDKs (anthropic, openai: about 3 s of imports on an
    # idle host); `--check`, the container healthcheck with its 5 s timeout, must not
    from airig.gateway.failures import Scrubber

log = logging.getLogger("airig.gateway")


class ScrubbingFormatter(logging.Formatter):
    """Every log line of the process, whoever logs it (uvicorn, httpx, the clients),
    without the key."""

    def __init__(self, inner: logging.Formatter, scrub: Scrubber) -> None:
        super().__init__()
        self.inner, self.scrub = inner, scrub

    def format(self, record: logging.LogRecord) -> str:
        return self.scrub.full(self.inner.format(record))


def check(settings: GatewaySettings) -> int:
    url = f"http://127.0.0.1:{settings.port}/health"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            body = json.load(response)
    except (OSError, ValueError, urllib.error.URLError) as exc:
        print(f"gateway unhealthy: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if not body.get("key_loaded"):
        print("gateway unhealthy: no provider key loaded", file=sys.stderr)
        return 1
    return 0 if body.get("ok") else 1


def serve(settings: GatewaySettings) -> int:
    import uvicorn

    from airig.gateway.app import create_app
    from airig.gateway.failures import Scrubber
    from airig.gateway.providers import make_provider

    key = load_key(settings)
    scrub = Scrubber(key)
    root = logging.getLogger()
    for handler in root.handlers:
        handler.setFormatter(ScrubbingFormatter(handler.formatter or logging.Formatter(), scrub))
    settings.require()
    provider = make_provider(
        settings.provider, settings.model, key, settings.base_url, settings.timeout_s
    )
    app = create_app(
        provider,
        settings.token.get_secret_value(),
        scrub,
        key_loaded=bool(key),
        concurrency=settings.concurrency,
        cache_size=settings.cache_size,
        max_body=settings.max_body_bytes,
    )
    config = uvicorn.Config(
        app,
        host=settings.listen_host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    log.info(
        "gateway listening",
        extra={
            "host": settings.listen_host,
            "port": settings.port,
            "provider": settings.provider,
            "model": settings.model,
            "base_url": settings.base_url or "(the provider's own)",
            "key_loaded": bool(key),
        },
    )
    if not key:
        log.error(
            "no provider key: every call will fail",
            extra={"hint": f"put the key in {settings.key_file} (AIRIG_GATEWAY_KEY_FILE)"},
        )
    uvicorn.Server(config).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airig.gateway")
    parser.add_argument("--check", action="store_true", help="exit 0 when the gateway is healthy")
    args = parser.parse_args(argv)
    setup_json_logging()
    try:
        settings = GatewaySettings()
        return check(settings) if args.check else serve(settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        # only the setting's name and pydantic's message: its input may be a secret
        log.error("invalid gateway setting", extra={"setting": first["loc"], "error": first["msg"]})
    except AirigError as exc:
        log.error(exc.message, extra={"hint": exc.hint})
    return 2


if __name__ == "__main__":
    sys.exit(main())
