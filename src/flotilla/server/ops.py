"""Operations: the scheduling report, Prometheus metrics, liveness and readiness."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from flotilla.api.schemas import Health, Report
from flotilla.server.context import Caller, Context
from flotilla.service.handle import CycleReport
from flotilla.store import SqlStore

router = APIRouter()


def cycle_dict(cycle: CycleReport) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for item in fields(cycle):
        value = getattr(cycle, item.name)
        data[item.name] = dict(value) if isinstance(value, Mapping) else value
    return data


@router.get("/v1/scheduling/report", tags=["scheduling"])
def scheduling_report(context: Context, _user: Caller) -> Report:
    """The scheduler's last cycle (decisions, timings, leadership, per-queue figures) and the
    store's job counts per queue and state."""
    cycle = context.scheduler.last_cycle() if context.scheduler is not None else None
    return Report(
        scheduler=None if cycle is None else cycle_dict(cycle),
        queues=context.store.job_counts(),
    )


@router.get("/metrics", tags=["operations"], response_class=Response)
def metrics(context: Context) -> Response:
    """Prometheus text: the scheduler's metrics (when one runs here) and the API's own."""
    body = generate_latest(context.metrics.registry)
    if context.scheduler is not None:
        body += generate_latest(context.scheduler.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/healthz", tags=["operations"])
def healthz() -> Health:
    """The process is alive and serving (no dependency is checked)."""
    return Health(status="ok")


@router.get("/readyz", tags=["operations"], responses={503: {"model": Health}})
def readyz(context: Context) -> Any:
    """Ready when the store answers and its schema is at the newest migration."""
    try:
        context.store.latest_serial()
        if isinstance(context.store, SqlStore):
            status = context.store.schema_status()
            if not status.at_head:
                detail = f"schema at revision {status.current}, code expects {status.head}"
                return JSONResponse(Health(status="unavailable", detail=detail).model_dump(), 503)
    except Exception as error:  # any failure to reach the database means "not ready"
        detail = f"store unreachable: {type(error).__name__}"
        return JSONResponse(Health(status="unavailable", detail=detail).model_dump(), 503)
    return Health(status="ready")
