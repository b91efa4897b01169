"""The brain's FastAPI application (OpenAPI at /docs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from airig import __version__
from airig.brain import routes_plans, routes_tasks, routes_workers
from airig.brain.service import Brain
from airig.brain.settings import BrainSettings


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
    app.state.brain = brain
    app.state.settings = settings
    app.state.db = brain.db
    app.include_router(routes_workers.router)
    app.include_router(routes_tasks.router)
    app.include_router(routes_plans.router)

    @app.get("/health", tags=["ops"])
    def health() -> dict:
        with brain.db.read() as conn:
            conn.execute("SELECT 1").fetchone()
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", tags=["ops"])
    def metrics() -> Response:
        return Response(generate_latest(brain.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # One JSON error shape; the type and message only, never a traceback.
        return JSONResponse(
            status_code=500, content={"detail": f"internal error: {type(exc).__name__}"}
        )

    return app
