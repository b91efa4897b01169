"""``python -m airig.gateway`` serves the gateway; ``--check`` is the container healthcheck
(0 when it answers /health with a key loaded)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from airig.common import healthcheck
from airig.common.errors import AirigError
from airig.common.jsonlog import setup_json_logging

if TYPE_CHECKING:
    # failures.py imports the provider SDKs (anthropic, openai: about 3 s of imports on an
    # idle host); `--check`, the container healthcheck with its 5 s timeout, must not. Nor
    # the settings, imported after `--check` is handled: their pydantic import is most of
    # a healthcheck's CPU (airig/common/healthcheck.py).
    from airig.gateway.failures import Scrubber
    from airig.gateway.settings import GatewaySettings

log = logging.getLogger("airig.gateway")


class ScrubbingFormatter(logging.Formatter):
    """Every log line of the process, whoever logs it (uvicorn, httpx, the clients),
    without the key."""

    def __init__(self, inner: logging.Formatter, scrub: Scrubber) -> None:
        super().__init__()
        self.inner, self.scrub = inner, scrub

    def format(self, record: logging.LogRecord) -> str:
        return self.scrub.full(self.inner.format(record))


def serve(settings: GatewaySettings) -> int:
    import uvicorn

    from airig.gateway.app import create_app
    from airig.gateway.failures import Scrubber
    from airig.gateway.providers import make_provider
    from airig.gateway.settings import load_key

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
    if args.check:  # the container healthcheck: the standard library only
        return healthcheck.run("gateway", healthcheck.gateway)
    from pydantic import ValidationError

    from airig.gateway.settings import GatewaySettings

    setup_json_logging()
    try:
        settings = GatewaySettings()
        return serve(settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        # only the setting's name and pydantic's message: its input may be a secret
        log.error("invalid gateway setting", extra={"setting": first["loc"], "error": first["msg"]})
    except AirigError as exc:
        log.error(exc.message, extra={"hint": exc.hint})
    return 2


if __name__ == "__main__":
    sys.exit(main())
