"""Client commands about the fleet's configuration: queues, quotas, clusters."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.tree import Tree

from flotilla.cli.client import ServerOption, api
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
    """List clusters (and with --nodes their nodes)."""
    with api(server) as client:
        found = client.get("/v1/clusters")
        node_lists = {c["name"]: client.get(f"/v1/clusters/{c['name']}/nodes") for c in found}
    table = Table(
        "CLUSTER", "BACKEND", "STATE", "NODES", "LABELS", "HEARTBEAT", box=None, header_style="bold"
    )
    for cluster in found:
        labels = ", ".join(f"{k}={v}" for k, v in cluster["labels"].items()) or "-"
        heartbeat = f"{age(cluster['heartbeat_at'])} ago" if cluster["heartbeat_at"] else "never"
        table.add_row(
            cluster["name"],
            cluster["backend"],
            cluster["state"],
            str(len(node_lists[cluster["name"]])),
            labels,
            heartbeat,
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


def register(app: typer.Typer) -> None:
    for command in (queues, quotas, clusters):
        app.command()(command)
