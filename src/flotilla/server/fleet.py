"""The fleet in force: show it, apply a new one (both admin-only).

An apply is validated first — the schema with field paths, then what this replica can check
of the service side (backends installed, their setting names, secret references resolvable,
local clusters' identity) — and then written in one transaction, all or nothing. The
scheduler of every replica takes it up at its next cycle, without a restart. Secrets are
references (``{env: NAME}``, ``{file: PATH}``): stored and returned as such, never resolved
here.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel

from flotilla.model.fleet_loader import FleetError, fleet_from_data
from flotilla.server.context import Caller, Context, require_admin
from flotilla.server.errors import ApiError
from flotilla.service.fleet import (
    check_fleet,
    check_local_owner,
    fleet_change,
    local_owner,
    local_state_dir_of,
)
from flotilla.store import ConflictError

router = APIRouter(prefix="/v1")


class FleetInForce(BaseModel):
    version: int
    """Grows by one with every apply."""
    applied_at: str
    fleet: dict[str, Any]
    """The fleet file as applied; secret references as given, never their values."""


@router.get("/fleet", tags=["fleet"])
def show_fleet(context: Context, user: Caller) -> FleetInForce:
    """The fleet in force (admin). 404 when the service runs its embedded default."""
    require_admin(user, "read the fleet")
    record = context.store.get_fleet()
    if record is None:
        raise ApiError(
            404, "no fleet applied: this service runs its embedded default (one local cluster)"
        )
    return FleetInForce(
        version=record.version,
        applied_at=record.applied_at.isoformat(),
        fleet=dict(record.document),
    )


@router.put("/fleet", tags=["fleet"])
def apply_fleet(
    body: Annotated[
        dict[str, Any],
        Body(
            description="A fleet file as JSON (docs/fleet.md).",
            json_schema_extra={"required": ["clusters", "queues"]},
        ),
    ],
    context: Context,
    user: Caller,
    expected_version: int | None = None,
) -> FleetInForce:
    """Make ``body`` the fleet in force (admin): 422 naming every invalid field, 409 when it
    cannot apply (a removed queue has jobs, a removed cluster has active jobs, another apply
    came first with ``expected_version``); nothing is changed then."""
    require_admin(user, "apply a fleet")
    try:
        fleet = fleet_from_data(body)
    except FleetError as error:
        raise ApiError(422, "invalid fleet", error.problems) from None
    problems = check_fleet(fleet)
    for cluster in fleet.clusters:
        if cluster.backend == "local":
            owner = local_owner(local_state_dir_of(cluster, None))
            if cluster.settings.get("state_dir") is not None:
                refused = check_local_owner(context.store, cluster.name, owner)
                if refused is not None:
                    problems.append(refused)
    if problems:
        raise ApiError(422, "invalid fleet", problems)
    try:
        record = context.store.apply_fleet(fleet_change(fleet, expected_version))
    except ConflictError as error:
        raise ApiError(409, "the fleet cannot be applied", error.problems or [str(error)]) from None
    context.wake()
    return FleetInForce(
        version=record.version,
        applied_at=record.applied_at.isoformat(),
        fleet=dict(record.document),
    )
