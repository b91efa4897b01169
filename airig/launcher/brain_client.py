"""The brain's HTTP client for the CLI (submit, list, show, cancel, tokens, workers).

Everything it needs comes from the launcher's settings of the checkout (flag >
environment > .env > default, ``airig.launcher.settings``): the brain URL is ``BRAIN_URL``,
else ``http://<AIRIG_BIND_ADDRESS>:<BRAIN_PORT>`` (the address the brain's port is
published on; 127.0.0.1 when it is all interfaces), the admin token ``BRAIN_ADMIN_TOKEN``.
The token is only ever sent in the Authorization header, never printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import requests

from airig.common.errors import AirigError, ConfigError
from airig.common.secrets import is_placeholder
from airig.launcher.settings import Settings

CONTENT_TYPES = {
    ".json": "application/json",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
}
UP_HINT = "start the stacks with `python start_services.py up`, or set BRAIN_URL"
# How the brain's 503 for a search index it cannot read begins; the fix ends it ("; ").
INDEX_UNAVAILABLE = "index_unavailable: "
# A JSON object the brain answered with.
Json = dict[str, Any]


class PlanRefused(AirigError):
    """The brain refused a plan; ``errors`` holds one entry per problem."""

    def __init__(self, message: str, hint: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message, hint)
        self.errors = errors


def brain_url(settings: Settings) -> str:
    if settings.brain_url:
        return settings.brain_url.rstrip("/")
    # The port is published on AIRIG_BIND_ADDRESS only: a brain bound to a LAN or bridge
    # address does not answer on 127.0.0.1.
    address = settings.bind_address or "127.0.0.1"
    if address in ("0.0.0.0", "::", "[::]"):
        address = "127.0.0.1"
    return f"http://{url_host(address)}:{settings.brain_port}"


def url_host(host: str) -> str:
    """A host as it goes into a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class BrainClient:
    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self.timeout_s = timeout_s

    @classmethod
    def from_settings(cls, settings: Settings) -> BrainClient:
        """This checkout's brain with its admin token (``checkout_settings()``)."""
        if is_placeholder(settings.brain_admin_token):
            raise ConfigError(
                "no BRAIN_ADMIN_TOKEN in the environment or .env",
                "run `python start_services.py up` once; it generates the token into .env",
            )
        return cls(brain_url(settings), settings.brain_admin_token)

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

    def submit(self, plan_file: Path, idempotency_key: str | None = None) -> Json:
        try:
            body = plan_file.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"cannot read {plan_file}: {exc.strerror}", "check the path"
            ) from None
        return self.submit_body(body, plan_file.suffix, idempotency_key)

    def submit_body(
        self, body: bytes, suffix: str, idempotency_key: str | None = None, rerun: bool = False
    ) -> Json:
        """A plan's text; ``suffix`` (``.yaml``, ``.json``, ``.md``) names its format.
        ``rerun``: every glob item runs, even one unchanged since an earlier plan. The
        brain hashes a glob's files the first time it sees them (a folder of videos: a
        while), hence the longer wait."""
        headers = {"Content-Type": CONTENT_TYPES.get(suffix.lower(), "application/yaml")}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        params = {"rerun": "true"} if rerun else None
        saved, self.timeout_s = self.timeout_s, max(self.timeout_s, 600.0)
        try:
            return self._object("POST", "/v1/plans", data=body, headers=headers, params=params)
        finally:
            self.timeout_s = saved

    def record_backup(self, body: Json) -> Json:
        """An archive `backup` wrote (``POST /v1/backups``)."""
        return self._object("POST", "/v1/backups", json=body)

    def plans(self, limit: int = 50) -> list[Json]:
        return cast(list[Json], self._object("GET", "/v1/plans", params={"limit": limit})["plans"])

    def plan(self, plan_id: str) -> Json:
        return self._object("GET", f"/v1/plans/{plan_id}")

    def task_result(self, plan_id: str, key: str) -> Json:
        """A SUCCEEDED task's output and file names."""
        return self._object(
            "GET", f"/v1/plans/{quote(plan_id, safe='')}/tasks/{quote(key, safe='')}/result"
        )

    def cancel(self, target: str) -> Json:
        """Cancel ``PLAN`` or one task ``PLAN/TASK``."""
        plan_id, _, task = target.partition("/")
        if task:
            return self._object("POST", f"/v1/plans/{plan_id}/tasks/{task}/cancel")
        return self._object("POST", f"/v1/plans/{plan_id}/cancel")

    def workers(self) -> list[Json]:
        return cast(list[Json], self._object("GET", "/v1/workers")["workers"])

    def forget_worker(self, name: str) -> Json:
        """Forget a worker gone for good; the brain refuses a live one (409)."""
        live = "the brain answered HTTP 409: "
        try:
            return self._object(
                "DELETE", f"/v1/workers/{quote(name, safe='')}",
                not_found="list the workers with `workers list` (or `status`)",
            )  # fmt: skip
        except AirigError as exc:
            if not exc.message.startswith(live):
                raise
            message, _, fix = exc.message.removeprefix(live).partition("; ")
            raise AirigError(message, fix) from None

    def create_token(self, scope: str, name: str, trust: str | None = None) -> Json:
        """A stored token; ``trust`` (untrusted | full) only for a join token."""
        body = {"scope": scope, "name": name, **({"trust": trust} if trust else {})}
        return self._object("POST", "/v1/tokens", json=body)

    def tokens(self) -> list[Json]:
        return cast(list[Json], self._object("GET", "/v1/tokens")["tokens"])

    def revoke_token(self, token_id: str) -> Json:
        return self._object(
            "DELETE", f"/v1/tokens/{quote(token_id, safe='')}",
            not_found="list the tokens and their ids with `token list`",
        )  # fmt: skip

    def prune(self, older_than_s: float | None, dry_run: bool) -> Json:
        """Delete (or count) finished plans older than that (None: the brain's retention);
        a large store takes a while, hence the longer wait."""
        body = {"older_than_s": older_than_s, "dry_run": dry_run}
        saved, self.timeout_s = self.timeout_s, max(self.timeout_s, 600.0)
        try:
            return self._object("POST", "/v1/plans/prune", json=body)
        finally:
            self.timeout_s = saved

    def store(self) -> Json:
        """The store's size on disk and the retention in force (``GET /v1/store``)."""
        return self._object("GET", "/v1/store")

    # ------------------------------------------------------------ goals
    def create_goal(self, goal: str, inputs_dir: str | None = None) -> Json:
        """Ask the brain's model to draft a plan for ``goal`` (``POST /v1/goals``)."""
        body = {"goal": goal, **({"inputs_dir": inputs_dir} if inputs_dir else {})}
        try:
            return self._object("POST", "/v1/goals", json=body)
        except PlanRefused as exc:
            message = exc.message.replace("refused the plan", "refused the goal", 1)
            raise AirigError(
                message, "give --inputs-dir a folder relative to the data volume, or none"
            ) from None

    def goal(self, goal_id: str) -> Json:
        return self._object(
            "GET", f"/v1/goals/{quote(goal_id, safe='')}", not_found="submit the goal again"
        )

    def approve_goal(self, goal_id: str) -> Json:
        """Submit the goal's draft as a plan; the answer holds its ``plan_id``."""
        return self._object("POST", f"/v1/goals/{quote(goal_id, safe='')}/approve")

    def reject_goal(self, goal_id: str) -> Json:
        return self._object("POST", f"/v1/goals/{quote(goal_id, safe='')}/reject")

    def escalations(self, limit: int = 20) -> Json:
        """The external tier's calls, spend against the budgets, and the tasks waiting."""
        return self._object("GET", "/v1/escalations", params={"limit": limit})

    def alerts(self) -> list[Json]:
        """The alerts that hold now (``GET /v1/alerts``): kind, subject, fired_at, message."""
        return cast(list[Json], self._object("GET", "/v1/alerts")["alerts"])

    def training_samples(self, params: Json) -> Json:
        """One page of ``GET /v1/training/samples``: samples, excluded counts, next cursor."""
        return self._object("GET", "/v1/training/samples", params=params)

    def search(self, query: str, index: str | None, k: int) -> Json:
        """``POST /v1/search``: the entries of an index nearest ``query``. The brain's
        refusals (no index, an unknown one, a bad query) become one line each."""
        body: Json = {"query": query, "k": k, **({"index": index} if index else {})}
        try:
            response = requests.request(
                "POST", f"{self.base_url}/v1/search", json=body, headers=self._headers,
                timeout=self.timeout_s,
            )  # fmt: skip
        except requests.RequestException as exc:
            raise AirigError(
                f"cannot reach the brain at {self.base_url} ({type(exc).__name__})", UP_HINT
            ) from None
        index_refusal = _index_unavailable(response)
        if index_refusal is not None:
            raise index_refusal
        if response.status_code in (404, 422, 502, 503):
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text[:300]
            if not isinstance(detail, str):  # FastAPI's field list
                detail = "; ".join(
                    f"{'.'.join(map(str, e.get('loc', [])[1:]))}: {e.get('msg')}"
                    for e in detail or []
                    if isinstance(e, dict)
                )
            hint = {
                404: "list the indexes with `search --list`",
                422: "check the query, -k (1..100) and the index name",
            }.get(response.status_code, "check the ollama service: `python start_services.py "
                  "triage ollama`")  # fmt: skip
            raise AirigError(f"search refused: {detail}", hint)
        return cast(Json, self._checked(response, "list the indexes with `search --list`"))

    def search_indexes(self) -> list[Json]:
        """``GET /v1/search/indexes``: name, model, dims, entries of each index."""
        try:
            response = requests.request(
                "GET", f"{self.base_url}/v1/search/indexes", headers=self._headers,
                timeout=self.timeout_s,
            )  # fmt: skip
        except requests.RequestException as exc:
            raise AirigError(
                f"cannot reach the brain at {self.base_url} ({type(exc).__name__})", UP_HINT
            ) from None
        index_refusal = _index_unavailable(response)
        if index_refusal is not None:
            raise index_refusal
        answer = cast(Json, self._checked(response, "list the indexes with `search --list`"))
        return cast(list[Json], answer["indexes"])

    def report(self, since: str, by: str) -> Json:
        """``GET /v1/report``: the kit's history per day or week (issue 40 §2). The brain's
        422 (a since or by it refuses) is its one line, not a refused plan."""
        response = self._send("GET", "/v1/report", params={"since": since, "by": by})
        if response.status_code == 422:
            raise AirigError(
                f"the brain refused the report: {_detail(response)}",
                "e.g. report --since 7d --by day",
            )
        return cast(Json, self._checked(response, "update the kit: this brain has no report"))

    def routing_advice(self, since: str | None = None) -> Json | None:
        """``GET /v1/report/routing``: suggested routing rules with their evidence (over the
        brain's default window, or ``since``); None from a brain that predates the route."""
        params = {"since": since} if since is not None else {}
        response = self._send("GET", "/v1/report/routing", params=params)
        if response.status_code == 404:
            return None
        if response.status_code == 422:
            raise AirigError(
                f"the brain refused the routing advice: {_detail(response)}",
                "e.g. report --routing --since 30d",
            )
        return cast(Json, self._checked(response, ""))

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            return requests.request(
                method, f"{self.base_url}{path}", headers=self._headers, timeout=self.timeout_s,
                **kwargs,
            )  # fmt: skip
        except requests.RequestException as exc:
            raise AirigError(
                f"cannot reach the brain at {self.base_url} ({type(exc).__name__})", UP_HINT
            ) from None

    def _object(self, method: str, path: str, **kwargs: Any) -> Json:
        """A request whose answer is a JSON object (every endpoint the CLI calls)."""
        return cast(Json, self._request(method, path, **kwargs))


def _detail(response: requests.Response) -> str:
    """An error answer's ``detail`` as one line (a string, or the first error's message)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = response.text[:300]
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        detail = detail[0].get("msg")
    return " ".join(str(detail).split())


def _index_unavailable(response: requests.Response) -> AirigError | None:
    """The brain's 503 for a search index file it cannot read (garbage on the data
    volume, a full one): what is wrong, with the fix the brain names as the hint."""
    if response.status_code != 503:
        return None
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return None
    if not isinstance(detail, str) or not detail.startswith(INDEX_UNAVAILABLE):
        return None
    what, _, fix = detail.removeprefix(INDEX_UNAVAILABLE).rpartition("; ")
    if not what:
        return AirigError(
            f"the search index is unavailable: {fix}", "see `python start_services.py logs brain`"
        )
    return AirigError(f"the search index is unavailable: {what}", fix)
