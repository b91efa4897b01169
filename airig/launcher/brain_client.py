"""The brain's HTTP client for the CLI (submit, list, show, cancel).

Brain URL: ``BRAIN_URL``, else ``http://<AIRIG_BIND_ADDRESS>:${BRAIN_PORT:-8080}`` (the
address the brain's port is published on; 127.0.0.1 when it is all interfaces); the admin
token from ``BRAIN_ADMIN_TOKEN`` in the environment, else from the checkout's ``.env``.
The token is only ever sent in the Authorization header, never printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from airig.common.errors import AirigError, ConfigError
from airig.common.secrets import is_placeholder
from airig.launcher.envfile import read_env

CONTENT_TYPES = {
    ".json": "application/json",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
}
UP_HINT = "start the stacks with `python start_services.py up`, or set BRAIN_URL"


class PlanRefused(AirigError):
    """The brain refused a plan; ``errors`` holds one entry per problem."""

    def __init__(self, message: str, hint: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message, hint)
        self.errors = errors


def _env_value(name: str, env_file: Path) -> str:
    if os.environ.get(name):
        return os.environ[name]
    return read_env(env_file).get(name, "") if env_file.is_file() else ""


def brain_url(env_file: Path) -> str:
    explicit = _env_value("BRAIN_URL", env_file)
    if explicit:
        return explicit.rstrip("/")
    port = _env_value("BRAIN_PORT", env_file) or "8080"
    # The port is published on AIRIG_BIND_ADDRESS only: a brain bound to a LAN or bridge
    # address does not answer on 127.0.0.1.
    address = _env_value("AIRIG_BIND_ADDRESS", env_file) or "127.0.0.1"
    if address in ("0.0.0.0", "::", "[::]"):
        address = "127.0.0.1"
    return f"http://{url_host(address)}:{port}"


def url_host(host: str) -> str:
    """A host as it goes into a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class BrainClient:
    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self.timeout_s = timeout_s

    @classmethod
    def from_env(cls, env_file: Path | None = None) -> BrainClient:
        env_file = env_file or Path(os.environ.get("AIRIG_HOME", ".")) / ".env"
        token = _env_value("BRAIN_ADMIN_TOKEN", env_file)
        if is_placeholder(token):
            raise ConfigError(
                "no BRAIN_ADMIN_TOKEN in the environment or .env",
                "run `python start_services.py up` once; it generates the token into .env",
            )
        return cls(brain_url(env_file), token)

    def _request(
        self, method: str, path: str, not_found: str = "list plans with `plans`", **kwargs: Any
    ) -> Any:
        headers = {**self._headers, **kwargs.pop("headers", {})}
        try:
            response = requests.request(
                method, f"{self.base_url}{path}", headers=headers, timeout=self.timeout_s, **kwargs
            )
        except requests.RequestException as exc:
            raise AirigError(
                f"cannot reach the brain at {self.base_url} ({type(exc).__name__})", UP_HINT
            ) from None
        return self._checked(response, not_found)

    def _checked(self, response: requests.Response, not_found: str) -> Any:
        if response.status_code in (401, 403):
            raise ConfigError(
                "the brain refused the admin token",
                "BRAIN_ADMIN_TOKEN must match the one the brain was started with (.env)",
            )
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:300]}
        if response.status_code in (413, 422):
            detail = body.get("detail")
            detail = detail if isinstance(detail, dict) else {"message": str(detail)}
            errors = detail.get("errors") or []
            raise PlanRefused(
                f"the brain refused the plan: {detail.get('message', 'invalid')}"
                + (f" ({len(errors)} problem(s))" if errors else ""),
                "fix the fields listed above and submit again",
                errors,
            )
        if response.status_code == 404:
            raise AirigError(str(body.get("detail", "not found")), not_found)
        if response.status_code >= 400:
            raise AirigError(
                f"the brain answered HTTP {response.status_code}: {body.get('detail')}",
                "see `docker compose logs brain`",
            )
        return body

    def submit(self, plan_file: Path, idempotency_key: str | None = None) -> dict:
        try:
            body = plan_file.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"cannot read {plan_file}: {exc.strerror}", "check the path"
            ) from None
        headers = {"Content-Type": CONTENT_TYPES.get(plan_file.suffix.lower(), "application/yaml")}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return self._request("POST", "/v1/plans", data=body, headers=headers)

    def plans(self, limit: int = 50) -> list[dict]:
        return self._request("GET", "/v1/plans", params={"limit": limit})["plans"]

    def plan(self, plan_id: str) -> dict:
        return self._request("GET", f"/v1/plans/{plan_id}")

    def cancel(self, target: str) -> dict:
        """Cancel ``PLAN`` or one task ``PLAN/TASK``."""
        plan_id, _, task = target.partition("/")
        if task:
            return self._request("POST", f"/v1/plans/{plan_id}/tasks/{task}/cancel")
        return self._request("POST", f"/v1/plans/{plan_id}/cancel")

    def workers(self) -> list[dict]:
        return self._request("GET", "/v1/workers")["workers"]

    def create_token(self, scope: str, name: str) -> dict:
        return self._request("POST", "/v1/tokens", json={"scope": scope, "name": name})

    def tokens(self) -> list[dict]:
        return self._request("GET", "/v1/tokens")["tokens"]

    def revoke_token(self, token_id: str) -> dict:
        return self._request(
            "DELETE", f"/v1/tokens/{quote(token_id, safe='')}",
            not_found="list the tokens and their ids with `token list`",
        )  # fmt: skip
