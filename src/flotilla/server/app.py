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
from fastapi_offline import FastAPIOffline
from starlette.routing import Route

from flotilla import __version__
from flotilla.model import JobSpec
from flotilla.scheduler.precedence import Precedence
from flotilla.secrets import SecretBox
from flotilla.server import (
    arrays,
    catalog,
    engine_ids,
    fleet,
    history,
    holds,
    jobs,
    ops,
    runs,
    usage,
    whatif,
)
from flotilla.server.auth import AuthSettings
from flotilla.server.context import ServerContext
from flotilla.server.errors import install_handlers
from flotilla.server.guard import RequestGuard, ServerLimits
from flotilla.server.requests_first import RequestsFirst
from flotilla.service.handle import SchedulerHandle
from flotilla.service.projection import Projection
from flotilla.store import Store

DESCRIPTION = """Flotilla's REST API: submit and follow jobs, manage queues and quotas, see the
fleet and why jobs wait. Send `Authorization: Bearer TOKEN` unless the server runs without a
token config (loopback only). Every error is `{"message": ..., "problems": ["path: problem"]}`.
"""


KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def create_app(
    store: Store,
    scheduler: SchedulerHandle | None,
    auth: AuthSettings,
    *,
    poll_interval: float = 0.2,
    limits: ServerLimits | None = None,
    allowed_hosts: frozenset[str] | None = None,
    secrets: SecretBox | None = None,
    projection: Projection | None = None,
) -> FastAPI:
    """``poll_interval``: how often an event stream looks for new events (seconds).
    ``allowed_hosts``: the ``Host`` names to answer (``LOOPBACK_HOSTS`` for a server on
    loopback); None answers any (see ``guard.py``)."""
    # Swagger UI from files the fastapi-offline package ships: no CDN, so /docs works on an
    # air-gapped cluster. ReDoc (/redoc) is served by flotilla.web, under a CSP.
    app = FastAPIOffline(
        title="Flotilla", version=__version__, description=DESCRIPTION, redoc_url=None
    )
    limits = limits or ServerLimits()
    context = ServerContext(
        store=store,
        scheduler=scheduler,
        auth=auth,
        poll_interval=poll_interval,
        limits=limits,
        secrets=secrets,
        precedence=scheduler.precedence if scheduler is not None else Precedence(),
        projection=projection,
    )
    app.state.flotilla = context
    store.add_observer(context.metrics)  # counts every submission and transition committed
    install_handlers(app)
    for module in (
        jobs,
        holds,
        arrays,
        history,
        engine_ids,
        catalog,
        ops,
        fleet,
        usage,
        runs,
        whatif,
    ):
        app.include_router(module.router)
    _count_requests(app, context)
    # A scheduling round of this process yields to requests, a large submission to the rest.
    app.add_middleware(RequestsFirst, precedence=context.precedence)
    # Added last, so it runs first: nothing (not even the metrics) sees a refused request.
    app.add_middleware(RequestGuard, limits=limits, allowed_hosts=allowed_hosts)
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
        # Only a matched route's template, and a known method, become labels: anything a
        # client makes up (a path, a method) is one "unmatched"/"OTHER" series, never a new one.
        template = route.path if isinstance(route, Route) else "unmatched"
        method = request.method if request.method in KNOWN_METHODS else "OTHER"
        context.metrics.latency.labels(method, template).observe(time.perf_counter() - start)
        context.metrics.requests.labels(method, template, str(response.status_code)).inc()
        return response


ERROR_STATUSES = {
    "400": "Bad request: a parameter or the body is not acceptable (problems name the field).",
    "401": "No bearer token, or one nobody has.",
    "403": "The caller lacks the permission, or the Host is not allowed.",
    "404": "No such job, queue, quota, cluster or run.",
    "409": "Conflicts with the current state (a name taken, a job that runs, a queue in use).",
    "413": "The body is larger than the server's limit.",
    "415": "The body is not application/json.",
    "422": "The request is well-formed but invalid (problems name each field).",
    "429": "Too many open event streams from this client.",
    "503": "Too many open event streams on this server.",
}
"""Every error any route can answer, each with the one error body (``errors.py``)."""

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "message": {"type": "string"},
        "problems": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["message", "problems"],
}


def _document_errors(schema: dict[str, Any]) -> None:
    """Document the error statuses on every operation (FastAPI documents only 422, with a
    body shape this server never sends)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    reference = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for status, description in ERROR_STATUSES.items():
                responses[status] = {"description": description, "content": reference}


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
            _document_errors(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
