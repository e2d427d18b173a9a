"""Client commands about the fleet's configuration: queues, quotas, clusters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table
from rich.tree import Tree

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.render import age, console, resources


def queues(server: ServerOption = "http://127.0.0.1:8467") -> None:
    """List queues with their weight, quota and job counts."""
    with api(server) as client:
        found = client.get("/v1/queues")
        counts = client.get("/v1/scheduling/report")["queues"]
    table = Table(
        "QUEUE", "WEIGHT", "QUOTA", "QUEUED", "RUNNING", "PREEMPTION", box=None, header_style="bold"
    )
    for queue in found:
        count = counts.get(queue["name"], {})
        running = sum(count.get(state, 0) for state in ("leased", "pending", "running"))
        table.add_row(
            queue["name"],
            f"{queue['weight']:g}",
            queue.get("quota") or "-",
            str(count.get("queued", 0)),
            str(running),
            queue["preemption"]["within_queue"],
        )
    console().print(table if found else "no queues")


def _quota_label(quota: dict[str, Any]) -> str:
    ceiling = resources(quota["max"]) if quota.get("max") is not None else "none"
    return f"[bold]{quota['name']}[/]  min {resources(quota['min'])}  max {ceiling}"


def _add(tree: Tree, quota: dict[str, Any]) -> None:
    branch = tree.add(_quota_label(quota))
    for child in quota.get("children", []):
        _add(branch, child)


def quotas(server: ServerOption = "http://127.0.0.1:8467") -> None:
    """Show the quota tree."""
    with api(server) as client:
        roots = client.get("/v1/quotas")
    if not roots:
        console().print("no quotas")
    for root in roots:
        tree = Tree(_quota_label(root))
        for child in root.get("children", []):
            _add(tree, child)
        console().print(tree)


def clusters(
    nodes: Annotated[bool, typer.Option("--nodes", help="Also list every cluster's nodes.")] = (
        False
    ),
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """List clusters: backend, health, heartbeat age, nodes, allocated/capacity per resource
    (and with --nodes every node)."""
    with api(server) as client:
        found = client.get("/v1/clusters")
        node_lists = (
            {c["name"]: client.get(f"/v1/clusters/{c['name']}/nodes") for c in found}
            if nodes
            else {}
        )
    table = Table(
        "CLUSTER",
        "BACKEND",
        "STATE",
        "HEARTBEAT",
        "NODES",
        "ALLOCATED/CAPACITY",
        "LABELS",
        box=None,
        header_style="bold",
    )
    for cluster in found:
        labels = ", ".join(
            f"{k}={v}" for k, v in cluster["labels"].items() if not k.startswith("flotilla.io/")
        )
        heartbeat = f"{age(cluster['heartbeat_at'])} ago" if cluster["heartbeat_at"] else "never"
        table.add_row(
            cluster["name"],
            cluster["backend"],
            cluster["state"],
            heartbeat,
            str(cluster.get("nodes", 0)),
            usage(cluster.get("allocated", {}), cluster.get("capacity", {})),
            labels or "-",
        )
    console().print(table if found else "no clusters")
    if nodes:
        for name, node_list in node_lists.items():
            detail = Table(
                "NODE",
                "STATE",
                "RESOURCES",
                title=name,
                box=None,
                header_style="bold",
                title_justify="left",
            )
            for node in node_list:
                detail.add_row(node["name"], node["state"], resources(node["resources"]))
            console().print(detail)


fleet_app = typer.Typer(
    help="The fleet in force: its clusters and their backends, queues, quotas and settings.",
    no_args_is_help=True,
)


@fleet_app.command("apply")
def fleet_apply(
    file: Annotated[Path, typer.Argument(help="Fleet file (YAML or JSON); see docs/fleet.md.")],
    expected_version: Annotated[
        int | None,
        typer.Option(help="Apply only if the fleet in force is still this version."),
    ] = None,
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """Change the fleet of a running service without a restart (admin): all or nothing."""
    from flotilla.model.fleet_loader import FleetError, load_fleet
    from flotilla.model.loader import parse_document

    try:
        load_fleet(file)  # the file's own problems, named by field, before any request
        data = parse_document(file.read_text(encoding="utf-8"), str(file))
    except FleetError as error:
        fail(f"{file}: invalid fleet", error.problems, code=2)
    params = {} if expected_version is None else {"expected_version": expected_version}
    with api(server) as client:
        applied = client.call("PUT", "/v1/fleet", json=data, params=params)
    clusters = ", ".join(c["name"] for c in applied["fleet"].get("clusters", []))
    console().print(
        f"fleet {applied['fleet'].get('name', 'fleet')!r} version {applied['version']} in "
        f"force: clusters {clusters}",
        highlight=False,
    )


@fleet_app.command("show")
def fleet_show(
    output_format: Annotated[
        str, typer.Option("--format", help="yaml or json.", case_sensitive=False)
    ] = "yaml",
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """Print the fleet in force (admin); secrets appear as their references, never values."""
    with api(server) as client:
        found = client.get("/v1/fleet")
    if output_format.lower() == "json":
        typer.echo(json.dumps(found["fleet"], indent=2))
        return
    typer.echo(f"# version {found['version']}, applied {found['applied_at']}")
    typer.echo(yaml.safe_dump(found["fleet"], sort_keys=False).rstrip("\n"))


def usage(allocated: dict[str, float], capacity: dict[str, float]) -> str:
    """``cpu 1/2, memory 1Gi/23.5Gi, gpu 0/8`` (resources the cluster has, in its order)."""
    from flotilla.model.quantity import format_quantity

    parts = [
        f"{name} {format_quantity(name, allocated.get(name, 0.0))}/{format_quantity(name, amount)}"
        for name, amount in capacity.items()
        if amount or allocated.get(name)
    ]
    return ", ".join(parts) or "-"


def register(app: typer.Typer) -> None:
    for command in (queues, quotas, clusters):
        app.command()(command)
    app.add_typer(fleet_app, name="fleet")
