"""Queues, quotas and clusters. Reading needs any valid token; changing needs the admin role.

PUT bodies may leave out ``name`` (it comes from the URL); a name that disagrees is an error,
not silently overridden.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Path, Response
from pydantic import BaseModel, ValidationError

from flotilla.api.schemas import Cluster, Node
from flotilla.model import QueueSpec, QuotaSpec
from flotilla.model.errors import from_pydantic
from flotilla.server.context import Caller, Context, require_admin
from flotilla.server.errors import ApiError
from flotilla.store import NotFoundError

router = APIRouter(prefix="/v1")

SpecT = TypeVar("SpecT", bound=BaseModel)

SpecName = Annotated[
    str, Path(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
"""A queue's or quota's name in a URL that creates one: the document says what a name may be
(``model.base.Name``), so a client learns it before a 422."""


def _named_spec(kind: type[SpecT], name: str, body: dict[str, Any]) -> SpecT:
    given = body.get("name", name)
    if given != name:
        raise ApiError(400, "name mismatch", [f"name: {given!r} does not match the URL's {name!r}"])
    try:
        return kind.model_validate({**body, "name": name})
    except ValidationError as error:
        raise ApiError(422, f"invalid {kind.__name__}", from_pydantic(error).problems) from None


@router.get("/queues", tags=["queues"])
def list_queues(context: Context, _user: Caller) -> list[QueueSpec]:
    return context.store.list_queues()


@router.get("/queues/{name}", tags=["queues"])
def get_queue(name: str, context: Context, _user: Caller) -> QueueSpec:
    return context.store.get_queue(name)


@router.put("/queues/{name}", tags=["queues"])
def put_queue(
    name: SpecName,
    body: Annotated[dict[str, Any], Body(description="A QueueSpec; `name` optional.")],
    context: Context,
    user: Caller,
) -> QueueSpec:
    """Create or replace a queue (admin). Its quota, if named, must exist."""
    require_admin(user, f"change queue {name!r}")
    spec = _named_spec(QueueSpec, name, body)
    if spec.quota is not None:
        try:
            context.store.get_quota(spec.quota)
        except NotFoundError:
            raise ApiError(400, "unknown quota", [f"quota: no such quota {spec.quota!r}"]) from None
    context.store.put_queue(spec)
    return spec


@router.delete("/queues/{name}", status_code=204, tags=["queues"])
def delete_queue(name: str, context: Context, user: Caller) -> Response:
    """Delete an empty queue (admin); 409 if it has jobs, whose history keeps it."""
    require_admin(user, f"delete queue {name!r}")
    context.store.delete_queue(name)
    return Response(status_code=204)


@router.get("/quotas", tags=["quotas"])
def list_quotas(context: Context, _user: Caller) -> list[QuotaSpec]:
    """The roots of the quota forest, each with its subtree."""
    return context.store.list_quotas()


@router.get("/quotas/{name}", tags=["quotas"])
def get_quota(name: str, context: Context, _user: Caller) -> QuotaSpec:
    return context.store.get_quota(name)


def _names(spec: QuotaSpec, path: str) -> list[tuple[str, str]]:
    """Every quota of ``spec``'s subtree with the field path that names it."""
    found = [(spec.name, path or "name")]
    for index, child in enumerate(spec.children):
        found += _names(child, f"{path + '.' if path else ''}children[{index}]")
    return found


def _check_quota_tree(forest: list[QuotaSpec], spec: QuotaSpec, parent: str | None) -> None:
    """The new subtree must keep the quotas a forest: no name twice, no quota its own
    ancestor. 422 naming the field; nothing is stored."""
    existing: dict[str, QuotaSpec] = {}
    for root in forest:
        for name, _ in _names(root, ""):
            existing.setdefault(name, root)
    replaced = next(
        (node for root in forest for node in _walk(root) if node.name == spec.name),
        None,
    )
    replaced_names = {name for name, _ in _names(replaced, "")} if replaced else set()
    problems: list[str] = []
    seen: set[str] = set()
    for name, path in _names(spec, ""):
        if name in seen:
            problems.append(f"{path}: quota {name!r} appears twice in this tree")
        elif name in existing and name not in replaced_names:
            problems.append(f"{path}: quota {name!r} already exists elsewhere in the tree")
        seen.add(name)
    if parent is not None and (parent in seen or parent in replaced_names):
        problems.append(
            f"parent: {parent!r} is in the subtree of {spec.name!r}: a quota "
            "cannot be its own ancestor"
        )
    if problems:
        raise ApiError(422, "invalid quota tree", problems)


def _walk(spec: QuotaSpec) -> list[QuotaSpec]:
    return [spec, *(node for child in spec.children for node in _walk(child))]


@router.put("/quotas/{name}", tags=["quotas"])
def put_quota(
    name: SpecName,
    body: Annotated[dict[str, Any], Body(description="A QuotaSpec with its children.")],
    context: Context,
    user: Caller,
    parent: str | None = None,
) -> QuotaSpec:
    """Create or replace a quota and its whole subtree (admin), under ``parent`` if given."""
    require_admin(user, f"change quota {name!r}")
    spec = _named_spec(QuotaSpec, name, body)
    _check_quota_tree(context.store.list_quotas(), spec, parent)
    try:
        context.store.put_quota(spec, parent=parent)
    except NotFoundError:
        raise ApiError(400, "unknown parent quota", [f"parent: no such quota {parent!r}"]) from None
    return context.store.get_quota(name)


@router.delete("/quotas/{name}", status_code=204, tags=["quotas"])
def delete_quota(name: str, context: Context, user: Caller) -> Response:
    """Delete a quota and its subtree (admin)."""
    require_admin(user, f"delete quota {name!r}")
    context.store.delete_quota(name)
    return Response(status_code=204)


@router.get("/clusters", tags=["clusters"])
def list_clusters(context: Context, _user: Caller) -> list[Cluster]:
    """Every cluster with its backend, health (``state``, ``heartbeat_at``, and ``reason``
    for an unreachable one, as the database keeps it), node count, and capacity and
    allocation per resource."""
    allocations = context.store.cluster_allocations()
    return [
        Cluster.from_record(
            cluster,
            allocations.get(cluster.name),
            reason=cluster.reason if cluster.state == "unreachable" else None,
        )
        for cluster in context.store.list_clusters()
    ]


@router.get("/clusters/{name}/nodes", tags=["clusters"])
def list_nodes(name: str, context: Context, _user: Caller) -> list[Node]:
    return [Node.from_record(node) for node in context.store.list_nodes(name)]
