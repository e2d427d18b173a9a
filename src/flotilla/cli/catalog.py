"""Client commands about queues, quotas and clusters: list them (``queues``, ``quotas`` with
usage, borrowing and lending, ``clusters``) and change them (``queue set|delete``, ``quota
set|delete``, admin) without writing JSON by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.output import Output, OutputOption, emit
from flotilla.cli.render import age, console, resources
from flotilla.lifecycle.states import ACTIVE_STATE_NAMES, TERMINAL_STATE_NAMES
from flotilla.model.quantity import format_quantity
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    from flotilla.model.queue import QueueSpec, QuotaSpec
    from flotilla.sdk import Client


def queues(output: OutputOption = Output.TABLE, server: ServerOption = DEFAULT_SERVER) -> None:
    """List queues with their weight, quota and job counts."""
    from rich.table import Table

    with api(server) as client:
        found = client.queues()
        counts = client.report().queues
    if emit(found, output):
        return
    columns = ["QUEUE", "WEIGHT", "QUOTA", "QUEUED", "RUNNING", "PREEMPTION"]
    if output is Output.WIDE:
        columns += ["RECLAIM", "BORROW", "DONE"]
    table = Table(*columns, box=None, header_style="bold")
    for queue in found:
        count = counts.get(queue.name, {})
        running = sum(count.get(state, 0) for state in ACTIVE_STATE_NAMES)
        row = [
            queue.name,
            f"{queue.weight:g}",
            queue.quota or "-",
            str(count.get("queued", 0)),
            str(running),
            queue.preemption.within_queue.value,
        ]
        if output is Output.WIDE:
            done = sum(count.get(state, 0) for state in TERMINAL_STATE_NAMES)
            row += [
                queue.preemption.reclaim_within_cohort.value,
                queue.preemption.borrow_within_cohort.policy.value,
                str(done),
            ]
        table.add_row(*row)
    console().print(table if found else "no queues")


def amounts(data: dict[str, float] | None) -> str:
    return "-" if not data else resources(data)


def quotas(output: OutputOption = Output.TABLE, server: ServerOption = DEFAULT_SERVER) -> None:
    """Show the quota tree: min, max, what its queues use now, what it borrows above its
    min and what it lends of its min."""
    from rich.table import Table

    with api(server) as client:
        rows: list[dict[str, Any]] = client.fleet_usage()["quotas"]
    if emit(rows, output):
        return
    if not rows:
        console().print("no quotas")
        return
    columns = ["QUOTA", "MIN", "MAX", "USAGE", "BORROWING", "LENDING"]
    if output is Output.WIDE:
        columns += ["LENDING LIMIT", "WEIGHT", "QUEUES"]
    table = Table(*columns, box=None, header_style="bold")
    for row in rows:
        cells = [
            "  " * row["depth"] + row["name"],
            amounts(row["min"]),
            "none" if row["max"] is None else amounts(row["max"]),
            amounts(row["usage"]),
            amounts(row["borrowing"]),
            amounts(row["lending"]),
        ]
        if output is Output.WIDE:
            limit = row["lending_limit"]
            cells += [
                "none" if limit is None else amounts(limit),
                f"{row['weight']:g}",
                ", ".join(row["queues"]) or "-",
            ]
        table.add_row(*cells)
    console().print(table)


def clusters(
    nodes: Annotated[bool, typer.Option("--nodes", help="Also list every cluster's nodes.")] = (
        False
    ),
    output: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """List clusters: backend, health, heartbeat age, nodes, allocated/capacity per resource
    (and with --nodes every node)."""
    from rich.table import Table

    with api(server) as client:
        found = client.clusters()
        node_lists = {c.name: client.nodes(c.name) for c in found} if nodes else {}
        in_use = _node_usage(client) if nodes and output is not Output.JSON else {}
    if emit({"clusters": found, "nodes": node_lists} if nodes else found, output):
        return
    table = Table(
        "CLUSTER", "BACKEND", "STATE", "HEARTBEAT", "NODES", "ALLOCATED/CAPACITY", "LABELS",
        box=None, header_style="bold",
    )  # fmt: skip
    for cluster in found:
        labels = ", ".join(
            f"{k}={v}"
            for k, v in cluster.labels.items()
            if output is Output.WIDE or not k.startswith("flotilla.io/")
        )
        heartbeat = f"{age(cluster.heartbeat_at)} ago" if cluster.heartbeat_at else "never"
        table.add_row(
            cluster.name,
            cluster.backend,
            cluster.state,
            heartbeat,
            str(cluster.nodes),
            usage(cluster.allocated, cluster.capacity),
            labels or "-",
        )
    console().print(table if found else "no clusters")
    for cluster in found:
        if cluster.reason:
            console().print(f"{cluster.name}: {cluster.state}: {cluster.reason}", markup=False)
    for name, node_list in node_lists.items():
        detail = Table(
            "NODE", "STATE", "ALLOCATED/CAPACITY", "GPUS", "GPUS IN USE", "JOBS", title=name,
            box=None, header_style="bold", title_justify="left",
        )  # fmt: skip
        for node in node_list:
            held = in_use.get((name, node.name), {})
            devices = int(held.get("gpu_devices") or node.resources.get("gpu", 0))
            busy = len(held.get("gpus_in_use") or {})
            detail.add_row(
                node.name,
                node.state,
                usage(held.get("allocated") or {}, node.resources),
                gpus_cell(node.gpus),
                f"{busy}/{devices}" if devices else "-",
                str(len(held.get("jobs") or [])),
            )
        console().print(detail)


def _node_usage(client: Client) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (cluster, node): what active runs hold there, GPU devices in use and jobs (the
    dashboard's view, which `up` and `serve` serve; none from a server without it)."""
    from flotilla.sdk.errors import FlotillaError

    try:
        clusters = client.fleet_usage()["clusters"]
    except FlotillaError:
        return {}
    return {
        (cluster["name"], node["name"]): node
        for cluster in clusters
        for node in cluster.get("nodes", [])
    }


def gpus_cell(gpus: dict[str, Any] | None) -> str:
    """``8 × NVIDIA A100-SXM4-80GB, 80Gi each, nvlink, 2 NUMA nodes`` (``-`` for none)."""
    if not gpus or not gpus.get("count"):
        return "-"
    parts = [f"{gpus['count']} × {gpus.get('model') or 'GPU'}"]
    if gpus.get("memory") is not None:
        parts.append(f"{format_quantity('gpu_memory', float(gpus['memory']))} each")
    topology = gpus.get("topology") or {}
    if topology.get("interconnect") and gpus["count"] > 1:
        parts.append(str(topology["interconnect"]))
    if (gpus.get("numa_nodes") or 1) > 1:
        parts.append(f"{gpus['numa_nodes']} NUMA nodes")
    return ", ".join(parts)


def usage(allocated: dict[str, float], capacity: dict[str, float]) -> str:
    """``cpu 1/2, memory 1Gi/23.5Gi, gpu 0/8`` (resources the cluster has, in its order)."""
    parts = [
        f"{name} {format_quantity(name, allocated.get(name, 0.0))}/{format_quantity(name, amount)}"
        for name, amount in capacity.items()
        if amount or allocated.get(name)
    ]
    return ", ".join(parts) or "-"


def resource_list(option: str, pairs: list[str] | None) -> dict[str, str] | None:
    """``["cpu=4", "memory=16Gi,gpu=2"]`` → ``{"cpu": "4", "memory": "16Gi", "gpu": "2"}``."""
    if pairs is None:
        return None
    found: dict[str, str] = {}
    for pair in (item for given in pairs for item in given.split(",") if item):
        name, sep, amount = pair.partition("=")
        if not sep or not name or not amount:
            fail(f"{option}: expected resource=amount, got {pair!r}", code=2)
        found[name.strip()] = amount.strip()
    return found


def _validated(kind: type[QueueSpec] | type[QuotaSpec], data: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    from flotilla.model.errors import from_pydantic

    try:
        return kind.model_validate(data)
    except ValidationError as error:
        fail(f"invalid {kind.__name__}", from_pydantic(error).problems, code=2)


queue_app = typer.Typer(
    help="Create, change or delete a queue (admin).", no_args_is_help=True, rich_markup_mode=None
)
quota_app = typer.Typer(
    help="Create, change or delete a quota (admin).", no_args_is_help=True, rich_markup_mode=None
)


@queue_app.command("set")
def queue_set(
    name: Annotated[str, typer.Argument(help="The queue; created if it does not exist.")],
    weight: Annotated[float | None, typer.Option(help="Its fair-share weight.")] = None,
    quota: Annotated[str | None, typer.Option(help="The quota it draws on ('' for none).")] = None,
    within_queue: Annotated[
        str | None, typer.Option(help="Preemption within the queue: never, lower_priority.")
    ] = None,
    reclaim_within_cohort: Annotated[
        str | None, typer.Option(help="Reclaim lent quota: never, lower_priority, any.")
    ] = None,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Create a queue, or change the given settings of one (the others stay)."""
    from flotilla.model.queue import QueueSpec

    with api(server) as client:
        existing = next((queue for queue in client.queues() if queue.name == name), None)
        data = (existing or QueueSpec(name=name)).model_dump(mode="json")
        if weight is not None:
            data["weight"] = weight
        if quota is not None:
            data["quota"] = quota or None
        if within_queue is not None:
            data["preemption"]["within_queue"] = within_queue
        if reclaim_within_cohort is not None:
            data["preemption"]["reclaim_within_cohort"] = reclaim_within_cohort
        spec: QueueSpec = _validated(QueueSpec, data)
        client.put_queue(spec)
    what = "changed" if existing else "created"
    console().print(f"queue {name} {what}: weight {spec.weight:g}, quota {spec.quota or 'none'}")


@queue_app.command("delete")
def queue_delete(
    name: Annotated[str, typer.Argument(help="A queue without jobs.")],
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Delete a queue that has no jobs (its jobs' history keeps it otherwise)."""
    with api(server) as client:
        client.delete_queue(name)
    console().print(f"queue {name} deleted")


def _find(
    roots: list[QuotaSpec], name: str, parent: str | None = None
) -> tuple[QuotaSpec, str | None] | None:
    """The quota named ``name`` and its parent's name (None for a root)."""
    for quota in roots:
        if quota.name == name:
            return quota, parent
        below = _find(list(quota.children), name, quota.name)
        if below is not None:
            return below
    return None


ResourcesOption = Annotated[
    list[str] | None, typer.Option(help="resource=amount[,…]; repeat or separate by commas.")
]


@quota_app.command("set")
def quota_set(
    name: Annotated[str, typer.Argument(help="The quota; created if it does not exist.")],
    minimum: Annotated[
        list[str] | None, typer.Option("--min", help="Guaranteed: resource=amount[,…].")
    ] = None,
    maximum: Annotated[
        list[str] | None, typer.Option("--max", help="Ceiling: resource=amount[,…].")
    ] = None,
    no_max: Annotated[bool, typer.Option("--no-max", help="Remove the ceiling.")] = False,
    lending_limit: ResourcesOption = None,
    weight: Annotated[float | None, typer.Option(help="Its weight among siblings.")] = None,
    parent: Annotated[
        str | None, typer.Option(help="Create it under this quota (a new quota only).")
    ] = None,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Create a quota, or change the given settings of one (its children stay)."""
    from flotilla.model.queue import QuotaSpec

    with api(server) as client:
        found = _find(client.quotas(), name)
        existing = None if found is None else found[0]
        data = (existing or QuotaSpec(name=name)).model_dump(mode="json", exclude_none=True)
        given = {
            "min": resource_list("--min", minimum),
            "max": resource_list("--max", maximum),
            "lending_limit": resource_list("--lending-limit", lending_limit),
            "weight": weight,
        }
        data.update({key: value for key, value in given.items() if value is not None})
        if no_max:
            data.pop("max", None)
        spec: QuotaSpec = _validated(QuotaSpec, data)
        if found is not None:
            if parent is not None and parent != found[1]:
                fail(f"--parent: quota {name} exists under {found[1] or 'no parent'}", code=2)
            parent = found[1]  # it stays where it is, with its children
        client.put_quota(spec, parent)
    ceiling = "none" if spec.max is None else resources(dict(spec.max))
    console().print(
        f"quota {name} {'changed' if existing else 'created'}: min {amounts(dict(spec.min))}, "
        f"max {ceiling}"
    )


@quota_app.command("delete")
def quota_delete(
    name: Annotated[str, typer.Argument(help="The quota; its subtree goes with it.")],
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Delete a quota and its subtree."""
    with api(server) as client:
        client.delete_quota(name)
    console().print(f"quota {name} deleted")


def register(app: typer.Typer) -> None:
    for command in (queues, quotas, clusters):
        app.command()(command)
    app.add_typer(queue_app, name="queue")
    app.add_typer(quota_app, name="quota")
