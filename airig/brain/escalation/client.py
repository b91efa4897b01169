"""The brain's client of the gateway (``POST /v1/complete``), the only door outward.

The brain holds the gateway's token, never the provider's key. An unreachable gateway, a
timeout and an answer the gateway marks retryable (a provider down, rate limited) are
retryable; 401 (wrong token), 422 (a request the gateway refuses) and a 502 marked not
retryable are not. An answer without the kit's error body: 5xx, 408 and 429 are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import requests

CONNECT_TIMEOUT_S = 5.0
# A provider may take minutes on a long answer; the brain does not block anything meanwhile.
READ_TIMEOUT_S = 300.0


@dataclass
class CallResult:
    ok: bool
    retryable: bool = False
    error: str = ""
    body: dict[str, Any] = field(default_factory=dict)
    retry_after_s: float | None = None  # the provider's Retry-After, passed on by the gateway


class GatewayClient:
    def __init__(self, url: str, token: str, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.read_timeout_s = read_timeout_s

    def complete(self, body: dict[str, Any]) -> CallResult:
        try:
            response = requests.post(
                f"{self.url}/v1/complete",
                json=body,
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=(CONNECT_TIMEOUT_S, self.read_timeout_s),
            )
        except requests.RequestException as exc:
            return CallResult(ok=False, retryable=True, error=f"gateway unreachable: {exc}")
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if response.status_code == 200 and isinstance(answer.get("text"), str):
            return CallResult(ok=True, body=answer)
        # The kit's one error body (airig/common/http_errors.py): detail, retryable,
        # retry_after_s. A proxy's answer without it: retryable by its status.
        detail = str(answer.get("detail") or response.text[:300])
        error = f"gateway HTTP {response.status_code}: {detail}"
        retryable = answer.get("retryable")
        if not isinstance(retryable, bool):
            retryable = response.status_code >= 500 or response.status_code in (408, 429)
        after = answer.get("retry_after_s")
        return CallResult(
            ok=False, retryable=retryable, error=error,
            retry_after_s=float(after) if isinstance(after, int | float) else None,
        )  # fmt: skip
