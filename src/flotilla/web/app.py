"""Mounts the dashboard on the API app: the page at ``/ui``, its files at ``/ui/static``, and
the few read-only endpoints the API lacks at ``/ui/api``.

The page itself holds no data: it is static HTML and JavaScript that calls the same ``/v1``
endpoints as the CLI, with the bearer token the person typed in. So the dashboard shows
exactly what the API would show that token, and refuses what the API refuses. The
``/ui/api`` endpoints take the same token and answer only aggregate views (what is allocated
where, over time) and who the caller is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from flotilla.lifecycle.states import JOB_STATE_ORDER, TERMINAL_STATE_NAMES, WAITING_STATE_NAMES
from flotilla.server.auth import ANONYMOUS, AuthSettings
from flotilla.server.context import Caller, Context, ServerContext
from flotilla.web.recent import recent_activity
from flotilla.web.timeline import Timeline
from flotilla.web.usage import fleet_usage

STATIC = Path(str(resources.files("flotilla.web") / "static"))

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
"""Only this server's own files: no CDN could be used even by mistake."""

router = APIRouter(prefix="/ui/api", tags=["dashboard"])


def _timeline(request: Request) -> Timeline:
    timeline: Timeline = request.app.state.flotilla_timeline
    return timeline


@router.get("/states")
def states() -> dict[str, list[str]]:
    """The job states the dashboard lists, filters and tests against, from the lifecycle
    core: every state in reading order, the terminal ones, the waiting ones. Not secret, so
    asked before signing in."""
    return {
        "states": [state.value for state in JOB_STATE_ORDER],
        "terminal": sorted(TERMINAL_STATE_NAMES),
        "waiting": sorted(WAITING_STATE_NAMES),
    }


def auth_mode(auth: AuthSettings) -> str:
    """How this server authenticates, in the words the page's header uses: ``tokens`` (a
    token config names its users), ``local-token`` (the loopback default: the token
    ``flotilla up`` wrote for its own user), ``off`` (no token at all: an app embedded in a
    test or a program)."""
    if auth.enabled:
        return "tokens"
    return "local-token" if auth.local_token_sha256 is not None else "off"


@router.get("/me")
def whoami(context: Context, user: Caller) -> dict[str, Any]:
    """The caller, their permissions and the server's auth mode: the page offers only the
    buttons that would work (the API still checks every action), and its header says
    whether a token is required and who the caller is, as the server knows them."""
    mode = auth_mode(context.auth)
    return {
        "name": user.name,
        "admin": user.admin,
        "queues": {queue: sorted(perms) for queue, perms in user.queues.items()},
        # A token is needed with a token config and with the local token alike.
        "auth_enabled": mode != "off",
        "auth_mode": mode,
        # The anonymous admin (auth off, or a local token of an account with no name) has
        # no identity to show.
        "identified": user is not ANONYMOUS,
    }


@router.get("/fleet")
async def fleet(context: Context, user: Caller) -> dict[str, Any]:
    """Clusters with nodes (allocated against capacity per resource, GPU devices in use),
    queues (running, queued, dominant share against fair share) and quotas (usage against
    min/max, borrowing and lending), computed now. The names of jobs the caller may not
    read (``read`` permission) are hidden."""

    def may_read(queue: str, owner: str | None) -> bool:
        return user.may_read(queue, owner or "")

    usage = await run_in_threadpool(partial(fleet_usage, context.store, may_read=may_read))
    return usage.as_dict()


@router.get("/recent")
async def recent(
    context: Context,
    user: Caller,
    limit: Annotated[int, Query(ge=1, le=5000, description="How many newest jobs.")] = 500,
) -> dict[str, Any]:
    """The newest jobs drawn as a simulation is: wait times per queue and runs on nodes. The
    names of jobs the caller may not read (``read`` permission) are hidden."""

    def may_read(queue: str, owner: str | None) -> bool:
        return user.may_read(queue, owner or "")

    return await run_in_threadpool(
        partial(recent_activity, context.store, limit=limit, may_read=may_read)
    )


@router.get("/timeline")
def timeline(
    request: Request,
    _user: Caller,
    since: Annotated[float | None, Query(description="Only samples after this time.")] = None,
) -> dict[str, Any]:
    """The fleet sampled every few seconds since this server started (bounded)."""
    sampler = _timeline(request)
    return {"interval": sampler.interval, "samples": sampler.samples(since)}


def _index() -> HTMLResponse:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    return HTMLResponse(
        html,
        headers={
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
        },
    )


REDOC_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self' 'unsafe-inline' blob:; worker-src 'self' blob:; connect-src 'self'"
)
"""ReDoc's bundle links a logo on a CDN: the policy keeps the browser from fetching it."""


def _redoc(app: FastAPI) -> HTMLResponse:
    page = get_redoc_html(
        openapi_url=app.openapi_url or "/openapi.json",
        title=f"{app.title} - ReDoc",
        redoc_js_url="/static-offline-docs/redoc.standalone.js",
        redoc_favicon_url="/static-offline-docs/favicon.png",
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = REDOC_POLICY
    return page


def mount_dashboard(app: FastAPI, *, timeline_interval: float = 2.0) -> FastAPI:
    """Add ``/ui`` to an app built by ``flotilla.server.create_app``; the timeline sampler
    runs while the app is served (started and stopped with its lifespan)."""
    context: ServerContext = app.state.flotilla
    sampler = Timeline(
        context.store,
        context.scheduler,
        interval=timeline_interval,
        pace=context.precedence.pace,  # requests go before a sample's walk
    )
    app.state.flotilla_timeline = sampler
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    def ui_page() -> HTMLResponse:
        return _index()

    @app.get("/ui/", include_in_schema=False)
    def ui_slash() -> RedirectResponse:
        return RedirectResponse("/ui")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui")

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _redoc(app)

    previous = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        sampler.start()
        try:
            async with previous(application) as state:
                yield state
        finally:
            sampler.stop()

    app.router.lifespan_context = lifespan
    return app
