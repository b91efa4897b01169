"""One JSON object per line on stdout, for the brain and the workers.

`docker compose logs` stays readable and every line parses. Exceptions are logged as
their type and message only: tracebacks carry local variables and stack noise.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

# Record attributes that are not "extra" fields (uvicorn adds a coloured copy of each line).
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None)))
_RESERVED |= {"message", "color_message"}


def utc_iso(ts: float | None = None) -> str:
    moment = datetime.now(UTC) if ts is None else datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "timestamp": utc_iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            line["error"] = f"{type(exc).__name__}: {exc}"
        return json.dumps(line, default=str)


def setup_json_logging(level: int = logging.INFO) -> None:
    """Route the root logger (and uvicorn's) to stdout as JSON lines."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uv_logger = logging.getLogger(name)
        uv_logger.handlers[:] = []
        uv_logger.propagate = True
    # Access lines for every long-poll would drown the events.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
