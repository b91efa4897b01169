"""The brain's FastAPI application (OpenAPI at /docs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from airig import __version__
from airig.brain.api.auth import bearer_from_scope, identify
from airig.brain.api.guard import RequestGuard
from airig.brain.api.routes import alerts as routes_alerts
from airig.brain.api.routes import backups as routes_backups
from airig.brain.api.routes import dashboard as routes_dashboard
from airig.brain.api.routes import escalations as routes_escalations
from airig.brain.api.routes import estimates as routes_estimates
from airig.brain.api.routes import goals as routes_goals
from airig.brain.api.routes import keyframes as routes_keyframes
from airig.brain.api.routes import plans as routes_plans
from airig.brain.api.routes import report as routes_report
from airig.brain.api.routes import routing as routes_routing
from airig.brain.api.routes import search as routes_search
from airig.brain.api.routes import tasks as routes_tasks
from airig.brain.api.routes import tokens as routes_tokens
from airig.brain.api.routes import training as routes_training
from airig.brain.api.routes import workers as routes_workers
from airig.brain.api.unwritable import DESCRIPTIONS as UNWRITABLE
from airig.brain.api.unwritable import degraded, install_unwritable
from airig.brain.service import Brain
from airig.brain.settings import BrainSettings
from airig.brain.store.db import ping
from airig.common.http_errors import error_body, headers_retry_after, validation_detail
from airig.common.jsonsafe import MAX_DEPTH
from airig.common.protocol import ErrorBody, ValidationErrorBody

# Refusals any authenticated route can give, documented once for every /v1 route.
COMMON_RESPONSES: dict = {
    400: {"model": ErrorBody, "description": "the body could not be read as JSON"},
    401: {"model": ErrorBody, "description": "no bearer token, or an unknown one"},
    403: {"model": ErrorBody, "description": "the token's scope cannot do this"},
    413: {"model": ErrorBody, "description": "the request body is too large"},
    503: {"model": ErrorBody, "description": UNWRITABLE[503]},
    507: {"model": ErrorBody, "description": UNWRITABLE[507]},
}


def _openapi(app: FastAPI) -> dict:
    """FastAPI's schema plus the plan models: ``POST /v1/plans`` reads its body itself
    (three formats), so FastAPI does not see them, but clients and fuzzers need them."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        from airig.brain.plans.models import PlanRequest

        schema = get_openapi(
            title=app.title, version=app.version, description=app.description,
            routes=app.routes,
        )  # fmt: skip
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        # FastAPI's 422 body, as the brain answers it: the one error body
        # (airig/common/http_errors.py) with FastAPI's list as its detail.
        for name, model in (
            ("PlanRequest", PlanRequest),
            ("HTTPValidationError", ValidationErrorBody),
        ):
            published = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(published.pop("$defs", {}))
            components[name] = published
        components.pop("ValidationError", None)  # FastAPI's item, replaced by FieldError
        app.openapi_schema = schema
    return app.openapi_schema


def served(app: FastAPI):
    """What the brain process serves: each request's clock (``timing.py``) outermost,
    then the exchange fast path in front of the app (it checks the token before the body
    and bounds the body itself, like the guard)."""
    from airig.brain.api.fastpath import ExchangeFastPath
    from airig.brain.timing import RequestTiming

    brain: Brain = app.state.brain
    return RequestTiming(
        ExchangeFastPath(app), brain.metrics.registry, app.state.settings.slow_request_ms
    )


def create_app(settings: BrainSettings) -> FastAPI:
    """An app bound to one Brain; secrets are checked before anything opens."""
    settings.require_secrets()
    brain = Brain(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        brain.start()
        yield
        brain.stop()

    app = FastAPI(
        title="airig brain",
        version=__version__,
        description="Plans, tasks, leases and workers of an airig cluster.",
        lifespan=lifespan,
    )
    # Outermost after Starlette's error layer: the token before the body, bounded bodies.
    app.add_middleware(RequestGuard, fastapi_app=app)
    app.state.brain = brain
    app.state.settings = settings
    app.state.db = brain.db
    for router in (
        routes_workers.router, routes_tasks.router, routes_plans.router, routes_tokens.router,
    ):  # fmt: skip
        app.include_router(router, responses=COMMON_RESPONSES)
    app.include_router(routes_dashboard.router, responses=COMMON_RESPONSES)
    app.include_router(routes_goals.router, responses=COMMON_RESPONSES)
    app.include_router(routes_escalations.router, responses=COMMON_RESPONSES)  # external tier
    app.include_router(routes_alerts.router, responses=COMMON_RESPONSES)  # read by triage
    app.include_router(routes_search.router, responses=COMMON_RESPONSES)  # what embed indexed
    app.include_router(routes_keyframes.router)  # a video hit's keyframe, for the dashboard
    app.include_router(routes_backups.router, responses=COMMON_RESPONSES)  # `backup`'s archives
    app.include_router(routes_training.router, responses=COMMON_RESPONSES)  # training export
    app.include_router(routes_estimates.router, responses=COMMON_RESPONSES)  # learned costs
    app.include_router(routes_report.router, responses=COMMON_RESPONSES)  # the kit's history
    app.include_router(routes_routing.router, responses=COMMON_RESPONSES)  # routing advice
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]

    @app.get("/health", tags=["ops"])
    def health() -> Any:
        """``ok``; 503 ``degraded`` while the store cannot be written (``unwritable.py``)."""
        with brain.db.read() as conn:
            ping(conn)
        return degraded(brain) or {"status": "ok", "version": __version__}

    @app.get(
        "/metrics",
        tags=["ops"],
        responses={
            200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}},
            401: COMMON_RESPONSES[401],
            403: COMMON_RESPONSES[403],
        },
    )
    def metrics(request: Request) -> Response:
        """Prometheus metrics: an admin or metrics token unless BRAIN_METRICS_PUBLIC=1."""
        if not settings.metrics_public:
            token = bearer_from_scope(request.scope)
            who = identify(request, token) if token else None
            if who is None:
                raise HTTPException(
                    401,
                    "missing or unknown bearer token (or set BRAIN_METRICS_PUBLIC=1)",
                    {"WWW-Authenticate": "Bearer"},
                )
            if who.scope not in ("admin", "metrics"):
                raise HTTPException(403, f"this token's scope ({who.scope}) cannot read metrics")
        return Response(generate_latest(brain.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first route on the path; GET and POST /v1/plans
            # are two routes, so list every method the path serves.
            methods = set()
            for route in app.router.routes:
                if route.matches(request.scope)[0] != Match.NONE:
                    methods |= set(getattr(route, "methods", None) or ())
            headers["Allow"] = ", ".join(sorted(methods))
        detail = exc.detail
        if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
            # FastAPI reads a body with json.loads, whose recursion gives out near a
            # thousand levels; it says only "There was an error parsing the body".
            detail = f"the body nests JSON too deep to read (at most {MAX_DEPTH} levels)"
        body = error_body(exc.status_code, detail, retry_after_s=headers_retry_after(headers))
        return JSONResponse(body, exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes the input back, and an input it cannot encode
        # (NaN, undecodable bytes) turned a 422 into a 500. Where and what only.
        return JSONResponse(
            status_code=422, content=error_body(422, validation_detail(exc.errors()))
        )

    install_unwritable(app, brain)  # 507 / 503 for a store that cannot be written

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The one error body (airig/common/http_errors.py); the type only, never a traceback.
        detail = f"internal error: {type(exc).__name__}"
        return JSONResponse(status_code=500, content=error_body(500, detail))

    return app
