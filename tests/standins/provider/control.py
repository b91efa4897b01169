"""Scripting the provider stand-in from a test (stdlib only).

from standins.provider.control import ProviderControl
provider = standins("provider")                # tests/standins/conftest_helpers.py
control = ProviderControl(provider.url)
control.answers("first answer", {"text": "slow one", "delay_s": 1})
control.mode("down", times=2)                  # the next 2 calls: 503 / 529
control.mode("rate_limited", retry_after=3)    # 429 + retry-after until mode("up")
control.requests()                             # what the provider was sent
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

# The key the stand-in accepts unless STANDIN_PROVIDER_KEY says otherwise (server.py).
DEFAULT_KEY = "sk-standin-0123456789abcdef0123456789abcdef"


class ProviderControl:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _call(self, method: str, path: str, body: object | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def answers(self, *items: str | dict[str, Any]) -> None:
        """Queue answers (a text, or {"text", "delay_s"}), used before the default one."""
        self._call("POST", "/_standin/answers", {"answers": list(items)})

    def mode(
        self,
        mode: str,
        times: int | None = None,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        """up | down (503 OpenAI / 529 Anthropic) | rate_limited (429 + retry-after);
        ``times``: for that many calls, then up again."""
        body: dict[str, Any] = {"mode": mode}
        for name, value in (("times", times), ("retry_after", retry_after), ("status", status)):
            if value is not None:
                body[name] = value
        self._call("POST", "/_standin/mode", body)

    def requests(self) -> list[dict[str, Any]]:
        """Every call so far: api, path, auth (ok / wrong / missing), headers (keys
        replaced by that word), body, status."""
        return self._call("GET", "/_standin/requests")

    def calls(self) -> list[dict[str, Any]]:
        """Only the calls that reached a provider route."""
        return [r for r in self.requests() if r["path"].startswith("/v1/")]

    def reset(self) -> None:
        self._call("POST", "/_standin/reset", {})
