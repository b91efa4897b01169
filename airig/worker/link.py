"""The worker's HTTP link to the brain.

Transport failures and 5xx answers are retried with capped exponential backoff and full
jitter, so a brain that is starting or restarting is waited for, never crash-looped on.
409 means the lease is gone (``LeaseLost``); 401 means the brain no longer knows this
worker's token (``Unregistered``: register again).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from typing import Any

import requests

from airig.common.errors import ConfigError
from airig.common.protocol import (
    Assignment,
    ClaimRequest,
    CompleteRequest,
    ExchangeRequest,
    ExchangeResponse,
    FailRequest,
    HeartbeatRequest,
    LeaseRef,
    RegisterRequest,
    RegisterResponse,
    ReleaseRequest,
)

log = logging.getLogger("airig.worker.link")


class LeaseLost(Exception):
    """The brain refused a write for this attempt (409): abort without side effects."""

    retry_after: str | None = None


class Unregistered(Exception):
    """The brain does not know this worker's token (401). ``token``: the one it refused,
    so a request sent before a new registration does not ask for yet another one."""

    token: str | None = None


class RegistrationRefused(ConfigError):
    """The brain refused the registration itself: its token (401 at register), or the
    name, another rig's (409 without Retry-After)."""


class BrainUnreachable(Exception):
    """The brain did not answer before the caller's deadline."""


class BrainLink:
    def __init__(self, base_url: str, bootstrap_token: str, retry_cap_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._bootstrap = bootstrap_token
        self._token = ""
        self._retry_cap_s = retry_cap_s
        self._local = threading.local()  # one requests.Session per thread

    @property
    def _session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        return self._local.session

    def _call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json_body: Any = None,
        data: bytes | None = None,
        params: dict | None = None,
        timeout: float = 15.0,
        deadline: float | None = None,
        stop: threading.Event | None = None,
    ) -> requests.Response:
        """One request, retried on transport errors and 5xx until ``deadline``."""
        failures = 0
        while True:
            used = token or self._token
            try:
                response = self._session.request(
                    method, f"{self.base_url}{path}", json=json_body, data=data, params=params,
                    headers={"Authorization": f"Bearer {used}"}, timeout=timeout,
                )  # fmt: skip
                if response.status_code < 500:
                    try:
                        return self._checked(response)
                    except Unregistered as exc:
                        exc.token = used
                        raise
                problem = f"HTTP {response.status_code}"
            except requests.RequestException as exc:
                problem = type(exc).__name__
            failures += 1
            delay = random.uniform(0, min(self._retry_cap_s, 0.2 * 2**failures))
            if deadline is not None and time.monotonic() + delay > deadline:
                raise BrainUnreachable(f"{method} {path}: {problem}")
            if failures in (1, 5) or failures % 20 == 0:
                log.warning("brain not answering, retrying", extra={"path": path, "error": problem})
            if stop is not None and stop.wait(delay):
                raise BrainUnreachable(f"{method} {path}: stopping")
            if stop is None:
                time.sleep(delay)

    @staticmethod
    def _checked(response: requests.Response) -> requests.Response:
        if response.status_code == 409:
            lost = LeaseLost(response.json().get("detail", "lease lost"))
            lost.retry_after = response.headers.get("Retry-After")
            raise lost
        if response.status_code == 401:
            raise Unregistered(response.text[:200])
        if response.status_code >= 400:
            raise RuntimeError(f"brain refused: HTTP {response.status_code} {response.text[:300]}")
        return response

    def still_unregistered(self, refused: Unregistered) -> bool:
        """Is the refused token still the one this link holds? False when the worker has
        registered again since that request left: a second registration would only race
        the first (and drop the leases it just got)."""
        return refused.token is None or refused.token == self._token

    def register(self, request: RegisterRequest, stop: threading.Event) -> RegisterResponse:
        """Trade the bootstrap token for a worker token. The token this link held (if
        any) goes along, so the brain lets this worker keep its name; a 409 means a live
        worker of this rig holds the name (another host, or this one's previous life,
        whose lease the brain waits out): retried after the brain's Retry-After. A 409
        without one: the name belongs to another rig, which no wait changes."""
        body = request.model_copy(update={"previous_token": self._token or None})
        while True:
            try:
                response = self._call(
                    "POST", "/v1/workers/register", token=self._bootstrap,
                    json_body=body.model_dump(), stop=stop,
                )  # fmt: skip
                break
            except Unregistered:
                # Not this worker's token but the registration token itself: a typo, a
                # new brain, or a join token the brain's admin revoked. Retrying cannot help.
                raise RegistrationRefused(
                    "the brain refused WORKER_BOOTSTRAP_TOKEN (unknown, or a revoked join token)",
                    "on a joined rig get a new token on the brain's machine "
                    "(`python start_services.py token create --join`) and run `join` again",
                ) from None
            except LeaseLost as exc:
                if exc.retry_after is None:
                    raise RegistrationRefused(
                        str(exc), "rename this worker as the brain says, then `up` again"
                    ) from None
                wait = min(self._retry_cap_s * 3, float(exc.retry_after))
                log.warning("worker name in use, waiting", extra={"detail": str(exc),
                                                                  "retry_s": wait})  # fmt: skip
                if stop.wait(wait):
                    raise BrainUnreachable("register: stopping") from None
        registered = RegisterResponse.model_validate(response.json())
        self._token = registered.token
        return registered

    def deregister(self) -> None:
        """Give the name back on a clean stop, so a restart can take it at once."""
        # On failure the brain frees the name a lease after the last heartbeat anyway.
        with contextlib.suppress(requests.RequestException):
            self._session.post(
                f"{self.base_url}/v1/workers/deregister",
                headers={"Authorization": f"Bearer {self._token}"}, timeout=3,
            )  # fmt: skip

    def heartbeat(self, body: HeartbeatRequest, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._call(
            "POST", "/v1/workers/heartbeat", json_body=body.model_dump(),
            timeout=timeout, deadline=deadline,
        )  # fmt: skip

    def claim(self, body: ClaimRequest, stop: threading.Event) -> Assignment | None:
        response = self._call(
            "POST", "/v1/claims", json_body=body.model_dump(), timeout=body.wait_s + 15, stop=stop
        )
        if response.status_code == 204:
            return None
        return Assignment.model_validate(response.json())

    def exchange(
        self,
        body: ExchangeRequest,
        stop: threading.Event | None = None,
        deadline_s: float | None = 600.0,
    ) -> ExchangeResponse:
        """Reports and a claim in one request; retried with the same body (same claim id)."""
        wait_s = body.claim.wait_s if body.claim else 0.0
        deadline = None if deadline_s is None else time.monotonic() + wait_s + deadline_s
        response = self._call(
            "POST", "/v1/exchange", json_body=body.model_dump(mode="json"),
            timeout=wait_s + 15, deadline=deadline, stop=stop,
        )  # fmt: skip
        return ExchangeResponse.model_validate(response.json())

    def lease_write(
        self, task_id: int, action: str, body: LeaseRef, deadline_s: float = 120.0
    ) -> dict:
        """start / heartbeat / complete / fail / release one attempt (retried, fenced)."""
        response = self._call(
            "POST", f"/v1/tasks/{task_id}/{action}", json_body=body.model_dump(),
            deadline=time.monotonic() + deadline_s,
        )  # fmt: skip
        return response.json()

    def upload(self, task: Assignment, name: str, content: bytes) -> str:
        response = self._call(
            "PUT", f"/v1/tasks/{task.task_id}/files/{name}", data=content,
            params={"attempt": task.attempt, "lease_id": task.lease_id},
            timeout=120.0, deadline=time.monotonic() + 300,
        )  # fmt: skip
        return response.json()["stored"]

    def complete(self, task: Assignment, body: CompleteRequest) -> dict:
        return self.lease_write(task.task_id, "complete", body, deadline_s=600.0)

    def fail(self, task: Assignment, body: FailRequest) -> dict:
        return self.lease_write(task.task_id, "fail", body, deadline_s=600.0)

    def release(self, task: Assignment, body: ReleaseRequest) -> dict:
        return self.lease_write(task.task_id, "release", body, deadline_s=15.0)
