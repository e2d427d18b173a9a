"""Accounting route: ``GET /v1/usage`` — resource-hours per queue, owner or job over a range.

A range end is a moment (ISO 8601; a date alone is midnight UTC; no offset means UTC) or a
duration back from now (``90m``, ``12h``, ``7d``, ``2w``). A caller sees the jobs of the
queues they may read and their own jobs elsewhere, as ``GET /v1/jobs`` does.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from flotilla.server.auth import Permission, User
from flotilla.server.context import Caller, Context, ServerContext
from flotilla.server.errors import ApiError
from flotilla.store import UsageGrouping, UsageQuery, UsageReport

router = APIRouter(prefix="/v1", tags=["accounting"])

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
LONGEST = timedelta(days=366 * 100)
"""Further back than anything a store holds; a larger duration is a typo."""

RANGE_HELP = "ISO 8601 time (UTC unless it has an offset) or a duration ago: 90m, 12h, 7d, 2w."

MOMENT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "string", "pattern": r"^[0-9]{1,9}(\.[0-9]{1,6})?[smhdw]$"},
    ]
}
"""What the document says a range end may be (``parse_moment`` takes a little more: spaces,
a date alone)."""


def parse_moment(
    text: str, now: datetime, field: str, title: str = "invalid usage range"
) -> datetime:
    """``text`` as an aware datetime; ``ApiError`` 422 naming ``field`` if it is neither."""
    match = DURATION.match(text)
    if match:
        seconds = float(match.group(1)) * UNITS[match.group(2)]
        # Further back than anything a store holds is the same range as the store's start.
        return now - timedelta(seconds=min(seconds, LONGEST.total_seconds()))
    try:
        moment = datetime.fromisoformat(text.strip())
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ApiError(
            422,
            title,
            [f"{field}: expected an ISO 8601 time or a duration such as 7d, got {text!r}"],
        ) from None


class UsageRowBody(BaseModel):
    """One group: its key fields (``queue``; ``owner``; or ``job``, ``name``, ``queue``,
    ``owner``: only those of the grouping are present), then the figures."""

    job: str | None = None
    name: str | None = None
    queue: str | None = None
    owner: str | None = None
    jobs: int
    runs: int
    elapsed_hours: float
    cpu_hours: float
    memory_gib_hours: float
    gpu_hours: float
    gpu_used_hours: float = Field(
        0.0, description="GPU-hours kept busy, of the runs whose GPU use was measured."
    )
    gpu_efficiency: float | None = Field(
        None, description="GPU-hours used over held, of the measured runs (like seff)."
    )


class UsageBody(BaseModel):
    since: datetime
    until: datetime
    by: UsageGrouping
    rows: list[UsageRowBody] = Field(description="Largest CPU-hours first.")
    total: UsageRowBody

    @classmethod
    def from_report(cls, report: UsageReport) -> UsageBody:
        rows = [UsageRowBody.model_validate(row.as_dict()) for row in report.rows]
        assert report.total is not None
        total = report.total.as_dict()
        total.pop("total", None)
        return cls(
            since=report.since,
            until=report.until,
            by=report.by,
            rows=rows,
            total=UsageRowBody.model_validate(total),
        )


def visibility(context: ServerContext, user: User) -> dict[str, Any]:
    """Who sees what: everything, or the readable queues and one's own jobs."""
    if user.can_read_all():
        return {}
    readable = frozenset(
        queue.name for queue in context.store.list_queues() if user.can(Permission.READ, queue.name)
    )
    return {"visible_queues": readable, "visible_owner": user.name}


@router.get("/usage", response_model_exclude_unset=True)
def usage(
    context: Context,
    user: Caller,
    since: Annotated[
        str, Query(max_length=64, description=RANGE_HELP, json_schema_extra=MOMENT_SCHEMA)
    ] = "7d",
    until: Annotated[
        str | None,
        Query(
            max_length=64,
            description=RANGE_HELP + " Default: now.",
            json_schema_extra={"anyOf": [*MOMENT_SCHEMA["anyOf"], {"type": "null"}]},
        ),
    ] = None,
    by: Annotated[UsageGrouping, Query(description="How to group the runs.")] = (
        UsageGrouping.QUEUE
    ),
) -> UsageBody:
    """CPU-, memory- (GiB) and GPU-hours that runs held within ``[since, until)``, grouped
    by queue, owner or job (a run still running counts up to now; each run is clipped to the
    range). Only jobs the caller may read count (see ``GET /v1/jobs``)."""
    now = datetime.now(UTC)
    start = parse_moment(since, now, "since")
    end = now if until is None else parse_moment(until, now, "until")
    if end <= start:
        raise ApiError(
            422,
            "invalid usage range",
            [f"until: {end.isoformat()} is not after since ({start.isoformat()})"],
        )
    query = UsageQuery(since=start, until=end, by=by, **visibility(context, user))
    return UsageBody.from_report(context.store.usage(query))
