"""The app factory: one FastAPI app over a store, an optional scheduler handle and auth.

``flotilla serve`` builds it over a store alone; ``flotilla up`` adds the scheduling loop's
handle, which supplies live pending reasons, logs, the cycle report and scheduler metrics.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from starlette.routing import Route

from flotilla import __version__
from flotilla.model import JobSpec
from flotilla.scheduler.handle import SchedulerHandle
from flotilla.server import catalog, fleet, history, jobs, ops
from flotilla.server.auth import AuthSettings
from flotilla.server.context import ServerContext
from flotilla.server.errors import install_handlers
from flotilla.store import Store

DESCRIPTION = """Flotilla's REST API: submit and follow jobs, manage queues and quotas, see the
fleet and why jobs wait. Send `Authorization: Bearer TOKEN` unless the server runs without a
token config (loopback only). Every error is `{"message": ..., "problems": ["path: problem"]}`.
"""


def create_app(
    store: Store,
    scheduler: SchedulerHandle | None,
    auth: AuthSettings,
    *,
    poll_interval: float = 0.2,
) -> FastAPI:
    """``poll_interval``: how often an event stream looks for new events (seconds)."""
    app = FastAPI(title="Flotilla", version=__version__, description=DESCRIPTION)
    context = ServerContext(
        store=store, scheduler=scheduler, auth=auth, poll_interval=poll_interval
    )
    app.state.flotilla = context
    install_handlers(app)
    for module in (jobs, history, catalog, ops, fleet):
        app.include_router(module.router)
    _count_requests(app, context)
    _document_job_spec(app)
    return app


def _count_requests(app: FastAPI, context: ServerContext) -> None:
    """Requests and latency by route template (never a raw path with ids in it: that would
    explode the label set)."""

    @app.middleware("http")
    async def _measure(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        if isinstance(route, Route):
            template = route.path
        else:  # FastAPI's own pages (/docs, /openapi.json) have fixed paths; 404s do not
            template = "unmatched" if response.status_code == 404 else request.url.path
        method = request.method
        context.metrics.latency.labels(method, template).observe(time.perf_counter() - start)
        context.metrics.requests.labels(method, template, str(response.status_code)).inc()
        return response


def _document_job_spec(app: FastAPI) -> None:
    """The submit route reads its body itself (to name every bad field of every job), so
    the JobSpec schema is added to the OpenAPI components by hand."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            spec = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(spec.pop("$defs", {}))
            components["JobSpec"] = spec
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
