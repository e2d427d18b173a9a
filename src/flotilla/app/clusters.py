"""The service's clusters at start: a fleet applied now, the fleet the database holds, or
this machine as one local cluster (with a ``default`` queue); and, for the start-up lines,
what each local cluster enforces of a job's requests and which GPUs it found."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from flotilla.app.config import ServiceConfig, StartupError
from flotilla.app.store import ensure_default_queue
from flotilla.backends import Backend
from flotilla.backends.local.backend import LocalBackend
from flotilla.model.fleet import Fleet
from flotilla.service.engines import engines_of, unwrapped
from flotilla.service.fleet import (
    LOCAL_LABEL,
    OWNER_LABEL,
    FleetRuntime,
    check_local_owner,
    describe_nodes,
    fleet_change,
    local_owner,
    local_state_dir_of,
)
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import ConflictError, FleetRecord, SqlStore


def connect_clusters(store: SqlStore, runtime: FleetRuntime, config: ServiceConfig) -> list[str]:
    """Drive the clusters ``config`` asks for; one line each to tell the user (more when a
    fleet is applied). ``StartupError`` when a cluster cannot be driven from here."""
    if config.fleet is not None:
        return apply_fleet(store, runtime, config.fleet, config.fleet_source)
    stored = store.get_fleet()
    if stored is not None:  # a fleet was applied to this database before
        # A cluster that cannot be built here (a secret this environment lacks, a backend
        # not installed) is unreachable with its reason, as at any later change of the fleet:
        # the rest of the fleet, and the API, are not held back (docs/fleet.md).
        runtime.sync()
        return [stored_fleet_notice(stored), *runtime.connect()]
    return default_cluster(store, runtime, config)


def stored_fleet_notice(stored: FleetRecord) -> str:
    """What a plain ``up`` runs when its database holds a fleet: not the local default the
    README promises for a fresh one, so it says which fleet, since when, and how to leave it."""
    name = stored.document.get("name") or "unnamed"
    applied = stored.applied_at.strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"fleet {name!r} (version {stored.version}, applied {applied}) kept from this "
        "database: a plain `up` runs the fleet last applied to it; for this machine's local "
        "cluster alone, start over another database (--db) or apply a fleet file of one "
        "local cluster (--fleet FILE, docs/fleet.md)"
    )


def register_clusters(store: SqlStore, backends: Mapping[str, Backend]) -> None:
    """Clusters a test or a benchmark hands the builder: each recorded as its backend
    reports it (engine: the backend's name), and a ``default`` queue if there is none."""
    for name, backend in backends.items():
        nodes = backend.inventory().nodes
        store.upsert_cluster(cluster_spec_from_inventory(name, backend.name, nodes))
    ensure_default_queue(store)


def apply_fleet(
    store: SqlStore, runtime: FleetRuntime, fleet: Fleet, path: Path | None
) -> list[str]:
    """Make ``fleet`` the fleet in force (as ``flotilla fleet apply`` does), then connect."""
    for cluster in fleet.clusters:
        if cluster.backend == "local":
            state_dir = local_state_dir_of(cluster, runtime.local_state_dir)
            refuse_foreign_owner(store, cluster.name, state_dir)
    # Build every backend before writing anything: a factory refusing its settings is a
    # configuration error (a constructor never fails for an engine being down).
    runtime.install(fleet, runtime.version)
    if runtime.problems:
        runtime.close()
        raise StartupError(
            f"{path}: cannot start the fleet",
            [f"cluster {name}: {problem}" for name, problem in runtime.problems.items()],
        )
    try:
        record = store.apply_fleet(fleet_change(fleet))
    except ConflictError as error:
        runtime.close()
        raise StartupError(
            f"{path}: cannot apply the fleet", error.problems or [str(error)]
        ) from None
    runtime.version = record.version
    return [
        f"fleet {fleet.name!r} (version {record.version}) from {path}",
        *runtime.connect(),
    ]


def refuse_foreign_owner(store: SqlStore, cluster: str, state_dir: Path) -> None:
    """``StartupError`` when another host or state dir drives ``cluster``; the operator is
    told this replica's state dir (the cluster's label holds only a digest of the other's)."""
    problem = check_local_owner(store, cluster, local_owner(state_dir))
    if problem is not None:
        raise StartupError(
            f"{problem} (this replica's state dir: {state_dir.expanduser().resolve()})"
        )


def default_cluster(store: SqlStore, runtime: FleetRuntime, config: ServiceConfig) -> list[str]:
    """The embedded default: one local cluster of this machine and a ``default`` queue."""
    cluster, state_dir = config.cluster, config.state_dir
    owner = local_owner(state_dir)
    refuse_foreign_owner(store, cluster, state_dir)
    backend = LocalBackend(
        cluster=cluster,
        state_dir=state_dir,
        run_as=config.run_as,
        uid_range=config.uid_range,
        owner_uids=store,  # each owner's uid of the range, for good (issue 37)
        allowed_working_dirs=config.allowed_working_dirs or (),
        any_working_dir=config.allowed_working_dirs is None,  # where the user is (issue 37)
    )
    runtime.backends[cluster] = runtime.kept(backend)
    nodes = backend.inventory().nodes  # asked once at start, directly: this machine answers
    labels = {LOCAL_LABEL: "true", OWNER_LABEL: owner}
    store.upsert_cluster(cluster_spec_from_inventory(cluster, "local", nodes, labels=labels))
    ensure_default_queue(store)
    return [f"cluster {cluster}: {describe_nodes(nodes)}"]


def isolation_notices(backends: Mapping[str, Backend]) -> list[str]:
    """One line per distinct notice of the local clusters: what of a job's requests this
    machine does not enforce (no cgroups, no PID namespaces; ``backends/local/tree.py``)."""
    notices = {
        backend.isolation_notice
        for backend in engines_of(backends)
        if isinstance(backend, LocalBackend)
    }
    return sorted(notice for notice in notices if notice)


def leftover_cgroup_notices(backends: Mapping[str, Backend]) -> list[str]:
    """One line when the start removed run cgroups left behind, empty, by servers killed
    before (``local_tree.sweep_leftovers``); none when there were none, or no local cluster."""
    from flotilla.backends.local import tree as local_tree

    if not any(isinstance(backend, LocalBackend) for backend in engines_of(backends)):
        return []
    try:
        removed = local_tree.sweep_leftovers()
    except OSError as error:  # never a reason not to start
        return [f"could not sweep leftover run cgroups: {error}"]
    if not removed:
        return []
    return [f"removed {removed} leftover run cgroup(s): empty, made by runs no longer running"]


def gpu_notices(backends: Mapping[str, Backend]) -> list[str]:
    """One line per local cluster: the GPUs it found and how (``local/gpu_inventory.py``)."""
    return [
        f"cluster {name}: {backend.gpu_notice}"
        for name, backend in sorted((name, unwrapped(b)) for name, b in backends.items())
        if isinstance(backend, LocalBackend)
    ]
