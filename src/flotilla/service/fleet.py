"""The fleet in a running service: one backend per cluster, built by entry point from the
fleet in force, and rebuilt when ``flotilla fleet apply`` changes it.

The fleet in force lives in the store (the applied file, secret references unresolved), so
every replica — the one that took the apply, the leader, a replica that starts later — builds
the same backends from it; each resolves the secret references itself, from its own
environment and files, and never writes a resolved value anywhere.

A cluster's backend is built with ``load_backend(cluster.backend, cluster=name,
**resolved_settings)``. A ``local`` cluster's state dir defaults to ``flotilla up
--state-dir``; its identity is the host and that directory (absolute), recorded on the
cluster as the label ``flotilla.io/owner``: a replica whose local cluster of that name would
be another one (another host, another state dir) refuses to start, since it could neither see
nor stop the runs the other one started.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flotilla.backends import (
    Backend,
    BackendUnavailable,
    UnknownBackend,
    available_backends,
    backend_factory,
)
from flotilla.framework.snapshot import SchedulingConfig, scheduling_config
from flotilla.model import ClusterSpec, PriorityClass, format_quantity
from flotilla.model.cluster import GpuSharing
from flotilla.model.fleet import Fleet, FleetCluster
from flotilla.model.fleet_loader import FleetError, fleet_from_data
from flotilla.model.node_info import NodeInfo
from flotilla.service.engines import ClusterEngine, EngineSettings, first_answers
from flotilla.service.fleet_settings import resolve, resolve_settings
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import FleetChange, FleetRecord, Store

log = logging.getLogger(__name__)

__all__ = ["FleetRuntime", "resolve_settings", "scheduling_config"]

OWNER_LABEL = "flotilla.io/owner"
"""On a ``local`` cluster: ``HOST:DIGEST`` of its state dir, the one place its runs can be
seen from. A digest, not the path: every token sees a cluster's labels, and the state dir
holds every run's logs (issue 23)."""

LOCAL_LABEL = "flotilla.io/local"


# --- validation ---------------------------------------------------------------------------


def _setting_problems(factory: Callable[..., Backend], settings: Mapping[str, Any]) -> list[str]:
    """Setting names the factory does not take (without calling it)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    parameters = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        # A ``**config`` factory (local, sim) forwards to a class: check that one's.
        target = getattr(factory, "__wrapped_backend__", None) or _forwarded_class(factory)
        if target is None:
            return []
        parameters = inspect.signature(target).parameters.values()
    names = {p.name for p in parameters}
    return sorted(set(settings) - names)


def _forwarded_class(factory: Callable[..., Backend]) -> Any:
    annotations = inspect.get_annotations(factory, eval_str=True)
    target = annotations.get("return")
    return target if inspect.isclass(target) else None


def _known_factory(backend: str) -> Callable[..., Backend] | None:
    """The backend's factory, whose signature types its settings (None: not installed)."""
    try:
        return backend_factory(backend)
    except UnknownBackend:
        return None


def check_fleet(
    fleet: Fleet,
    *,
    environ: Mapping[str, str] | None = None,
    local_state_dir: Path | None = None,
) -> list[str]:
    """Everything a service needs of a fleet beyond its schema: every backend installed
    (else the known ones are listed), every setting one the backend takes, every secret
    reference resolvable here, no two local clusters over one state dir."""
    problems: list[str] = []
    known = available_backends()
    local_dirs: dict[Path, str] = {}
    for index, cluster in enumerate(fleet.clusters):
        try:
            factory = backend_factory(cluster.backend)
        except UnknownBackend:
            problems.append(
                f"clusters[{index}].backend: unknown backend {cluster.backend!r} (installed: "
                f"{', '.join(known) or 'none'}; a backend registers under the entry-point "
                "group 'flotilla.backends')"
            )
            continue
        for name in _setting_problems(factory, cluster.settings):
            problems.append(
                f"clusters[{index}].settings.{name}: not a setting of the {cluster.backend} backend"
            )
        problems += resolve_settings(cluster, index, environ, factory)[1]
        if cluster.backend == "local":
            state_dir = local_state_dir_of(cluster, local_state_dir)
            if state_dir in local_dirs:
                problems.append(
                    f"clusters[{index}].settings.state_dir: {state_dir} is also the state dir "
                    f"of {local_dirs[state_dir]}; two local clusters cannot share runs (give "
                    "each its own state_dir)"
                )
            local_dirs[state_dir] = f"clusters[{index}]"
    return problems


def local_state_dir_of(cluster: FleetCluster, default: Path | None) -> Path:
    given = cluster.settings.get("state_dir")
    base = Path(given) if isinstance(given, str) else (default or Path(".flotilla/local"))
    return base.expanduser().resolve()


def local_owner(state_dir: Path) -> str:
    return _owner(socket.gethostname(), str(state_dir.expanduser().resolve()))


def _owner(host: str, state_dir: str) -> str:
    return f"{host}:{hashlib.sha256(state_dir.encode()).hexdigest()[:16]}"


def _recorded_owner(recorded: str) -> str:
    """A recorded owner label as ``local_owner`` writes it now: one written before issue 23
    held the state dir's path (``HOST:/PATH``), taken as its digest."""
    host, _, place = recorded.partition(":")
    return _owner(host, place) if place.startswith("/") else recorded


def check_local_owner(store: Store, cluster: str, owner: str) -> str | None:
    """Why this replica cannot drive the local cluster ``cluster`` (None: it can)."""
    for record in store.list_clusters():
        if record.name == cluster and record.backend == "local":
            recorded = record.labels.get(OWNER_LABEL)
            if recorded is not None and _recorded_owner(recorded) != owner:
                return (
                    f"cluster {cluster}: this local cluster is {_recorded_owner(recorded)} "
                    f"(host:digest of its state dir); this replica's would be {owner}. "
                    "Replicas share a local cluster only on "
                    "that host with that state dir (--state-dir), where they see its runs; "
                    "replicas on several hosts need remote backends (ray, slurm, kubernetes)"
                )
    return None


def describe_nodes(nodes: Sequence[NodeInfo]) -> str:
    """``node vm (cpu 2, memory 3.8Gi)`` or ``3 nodes (cpu 96, gpu 8, memory 1.5Ti)``."""
    totals: dict[str, float] = {}
    for node in nodes:
        for name, amount in node.capacity.items():
            totals[name] = totals.get(name, 0.0) + amount
    capacity = ", ".join(
        f"{name} {format_quantity(name, amount)}" for name, amount in totals.items() if amount
    )
    if len(nodes) == 1:
        return f"node {nodes[0].name} ({capacity})"
    return f"{len(nodes)} nodes ({capacity})"


# --- the fleet as the store keeps it ------------------------------------------------------


def fleet_document(fleet: Fleet) -> dict[str, Any]:
    """The fleet as stored and shown: the fields the file gives, secret references as
    given (quantities in base units)."""
    return fleet.model_dump(mode="json", exclude_unset=True)


def fleet_change(fleet: Fleet, expected_version: int | None = None) -> FleetChange:
    clusters = [
        ClusterSpec.model_construct(
            name=cluster.name,
            labels=dict(cluster.labels),
            cost=dict(cluster.cost),
            backend=cluster.backend,
            gpu_sharing=cluster.gpu_sharing,
            topology=list(cluster.topology),
            startup_delay=0.0,
            fail_at=None,
            nodes=list(cluster.nodes),
        )
        for cluster in fleet.clusters
    ]
    return FleetChange(
        document=fleet_document(fleet),
        queues=list(fleet.queues),
        quotas=list(fleet.quotas),
        clusters=clusters,
        expected_version=expected_version,
    )


def fleet_of(record: FleetRecord) -> Fleet:
    return fleet_from_data(dict(record.document), "the fleet in force")


# --- the backends of one replica ----------------------------------------------------------


def _fingerprint(cluster: FleetCluster) -> str:
    """What a backend is built from (references, not values): a change rebuilds it. A local
    cluster's backend also enforces its ``gpu_sharing`` (monitor, mps); a simulated one is
    built from the cluster's ``nodes`` (``FleetRuntime.build``), so a node added there is a
    change too."""
    sharing = cluster.gpu_sharing.value if cluster.backend == "local" else None
    nodes = (
        [group.model_dump(mode="json") for group in cluster.nodes]
        if cluster.backend == "sim" and "nodes" not in cluster.settings
        else None
    )
    return json.dumps([cluster.backend, cluster.settings, sharing, nodes], sort_keys=True)


@dataclass
class FleetRuntime:
    """The fleet in force in this replica: its backends (shared with the scheduling loop,
    mutated in place), its scheduling configuration and priority classes.

    ``sync()`` is called every cycle: one primary-key read, and a rebuild only when the
    version changed. A backend whose settings did not change is kept (its runs, watches and
    connections with it); a removed cluster's backend is closed (``close`` never stops runs).
    """

    store: Store
    backends: dict[str, Backend]
    local_state_dir: Path | None = None
    local_run_as: str | None = None
    """``flotilla up --run-as``: the user a local cluster's jobs run as, unless its own
    settings say who (``run_as`` or ``uid_range``)."""
    local_uid_range: str | None = None
    """``flotilla up --uid-range`` (as root, its default): each run of a local cluster whose
    settings say nobody runs as a uid of its own from this range."""
    local_working_dirs: tuple[str, ...] = ()
    """``flotilla up --allow-working-dir``: a local cluster whose settings name no
    ``allowed_working_dirs`` takes these."""
    environ: Mapping[str, str] | None = None
    factory: Callable[..., Backend] | None = None
    """Tests: build every backend with this instead of by entry point."""
    engines: EngineSettings | None = None
    """Keep every backend at arm's length with these settings (``engines.py``: its calls
    on workers of its cluster, with a timeout and a backoff); None: call it directly."""
    on_late_answer: Callable[[], None] | None = None
    """Called when an engine answers after its caller stopped waiting (the loop's wake)."""
    fleet: Fleet | None = None
    version: int = 0
    problems: dict[str, str] = field(default_factory=dict)
    """Cluster → why its backend could not be built here (shown as its state's reason)."""
    _fingerprints: dict[str, str] = field(default_factory=dict)

    @property
    def scheduling(self) -> SchedulingConfig | None:
        return scheduling_config(self.fleet.settings) if self.fleet is not None else None

    @property
    def priority_classes(self) -> Sequence[PriorityClass]:
        return self.fleet.priority_classes if self.fleet is not None else ()

    def sync(self) -> bool:
        """Take up a newer fleet from the store; True if it changed."""
        version = self.store.fleet_version()
        if version == self.version:
            return False
        record = self.store.get_fleet()
        if record is None:
            return False
        try:
            fleet = fleet_of(record)
        except FleetError as error:  # never applied so: a newer Flotilla wrote it
            log.error("cannot read the fleet in force (version %d): %s", record.version, error)
            self.version = record.version
            return False
        self.install(fleet, record.version)
        return True

    def install(self, fleet: Fleet, version: int) -> None:
        """Build, keep or close backends so that there is one per cluster of ``fleet``."""
        wanted = {cluster.name for cluster in fleet.clusters}
        for name in list(self.backends):
            if name not in wanted:
                self._close(name)
        for index, cluster in enumerate(fleet.clusters):
            fingerprint = _fingerprint(cluster)
            if cluster.name in self.backends and self._fingerprints.get(cluster.name) == (
                fingerprint
            ):
                continue
            if cluster.name in self.backends:
                self._close(cluster.name)
            self.problems.pop(cluster.name, None)
            try:
                self.backends[cluster.name] = self.kept(self.build(cluster, index))
                self._fingerprints[cluster.name] = fingerprint
            except (FleetError, TypeError, ValueError, OSError, UnknownBackend) as error:
                problem = "; ".join(error.problems) if isinstance(error, FleetError) else error
                self.problems[cluster.name] = self._secrets_hidden(cluster, index, str(problem))
                self._unreachable(cluster.name)
        self.fleet, self.version = fleet, version

    def _secrets_hidden(self, cluster: FleetCluster, index: int, text: str) -> str:
        """``text`` (a factory's own error may quote a setting) without any secret of the
        cluster's settings in it."""
        return resolve(cluster, index, self.environ).scrub(text)

    def _unreachable(self, cluster: str) -> None:
        """A cluster whose backend cannot be built here is ``unreachable`` (said once, here,
        not every cycle): nothing is leased to it, whatever it was before. A replica that can
        build it (its own secrets) marks it ready again when it answers."""
        log.error("cluster %s: cannot build its backend: %s", cluster, self.problems[cluster])
        if any(record.name == cluster for record in self.store.list_clusters()):
            self.store.set_cluster_state(cluster, "unreachable", reason=self.problems[cluster])

    def kept(self, backend: Backend) -> Backend:
        """``backend`` as this replica calls it: at arm's length when ``engines`` is set."""
        if self.engines is None:
            return backend
        return ClusterEngine(backend, self.engines, on_late_answer=self.on_late_answer)

    def build(self, cluster: FleetCluster, index: int) -> Backend:
        """A new backend for ``cluster``; raises ``FleetError`` naming the field, or the
        factory's own ``TypeError``/``ValueError``."""
        resolved = resolve(cluster, index, self.environ, _known_factory(cluster.backend))
        if resolved.problems:
            raise FleetError(resolved.problems)
        settings = resolved.values
        if cluster.backend == "local":
            settings["state_dir"] = str(local_state_dir_of(cluster, self.local_state_dir))
            if "run_as" not in settings and "uid_range" not in settings:
                if self.local_run_as is not None:
                    settings["run_as"] = self.local_run_as
                elif self.local_uid_range is not None:
                    settings["uid_range"] = self.local_uid_range
            if "allowed_working_dirs" not in settings and self.local_working_dirs:
                settings["allowed_working_dirs"] = list(self.local_working_dirs)
            settings.pop("owner_uids", None)  # not a setting: the store, below
            if "uid_range" in settings:  # each owner's uid of it, kept in the store
                settings["owner_uids"] = self.store
            refused = check_local_owner(self.store, cluster.name, self.local_owner_of(cluster))
            if refused is not None:
                raise FleetError([refused])
            if cluster.gpu_sharing in (GpuSharing.MONITOR, GpuSharing.MPS):  # local enforces
                settings["gpu_sharing"] = cluster.gpu_sharing.value
        if cluster.backend == "sim" and "nodes" not in settings and cluster.nodes:
            settings["nodes"] = [group.model_dump(mode="json") for group in cluster.nodes]
        if self.factory is not None:
            return self.factory(cluster.backend, cluster=cluster.name, **settings)
        return backend_factory(cluster.backend)(cluster=cluster.name, **settings)

    def cluster_names(self) -> list[str]:
        """The clusters in declaration order (strategies break ties by it)."""
        return [cluster.name for cluster in self.fleet.clusters] if self.fleet else []

    def local_owner_of(self, cluster: FleetCluster) -> str:
        return local_owner(local_state_dir_of(cluster, self.local_state_dir))

    def _close(self, name: str) -> None:
        backend = self.backends.pop(name, None)
        self._fingerprints.pop(name, None)
        if backend is not None:
            try:
                backend.close()
            except Exception:  # a backend that fails to close must not stop the reload
                log.exception("cluster %s: closing its backend failed", name)

    def cluster_spec(self, name: str, nodes: Sequence[NodeInfo]) -> ClusterSpec:
        """The cluster as the store keeps it: nodes from the backend, the rest from the
        fleet (labels, cost) and, for a local cluster, its owner."""
        cluster = None
        if self.fleet is not None:
            try:
                cluster = self.fleet.cluster(name)
            except KeyError:
                cluster = None
        backend = cluster.backend if cluster is not None else "local"
        labels = (
            self.fleet.labels_of(cluster) if cluster is not None and self.fleet is not None else {}
        )
        if backend == "local" and cluster is not None:
            labels.setdefault(LOCAL_LABEL, "true")
            labels[OWNER_LABEL] = local_owner(local_state_dir_of(cluster, self.local_state_dir))
        spec = cluster_spec_from_inventory(name, backend, nodes, labels=labels)
        if cluster is not None and cluster.cost:
            spec = spec.model_copy(update={"cost": dict(cluster.cost)})
        if cluster is not None:
            update = {"gpu_sharing": cluster.gpu_sharing, "topology": list(cluster.topology)}
            spec = spec.model_copy(update=update)
        return spec

    def connect(self) -> list[str]:
        """Ask every cluster's backend for its inventory once and record its nodes: one line
        per cluster saying what it connected to, or — engine down — why not (the cluster is
        then unreachable and the scheduler asks it again with backoff; no round waits for it).
        Kept at arm's length, the engines are asked all at once and waited for up to their
        call timeout: an engine slow to make its first connection (Ray's client) is not
        called unreachable, and one that never answers delays the start once, by that."""
        lines = []
        if self.engines is not None:  # every engine at once, not in turn, up to its timeout
            first_answers(self.backends, self.engines.timeout)
        for index, cluster in enumerate(self.fleet.clusters if self.fleet is not None else ()):
            where = f"cluster {cluster.name} ({cluster.backend})"
            backend = self.backends.get(cluster.name)
            if backend is None:
                lines.append(f"{where}: not started: {self.problems.get(cluster.name, '?')}")
                continue
            try:
                nodes = backend.inventory().nodes
            except BackendUnavailable as error:
                first = (str(error).splitlines() or [type(error).__name__])[0]
                first = self._secrets_hidden(cluster, index, first)
                self.store.set_cluster_state(
                    cluster.name, "unreachable", reason=f"its backend did not answer: {first}"
                )
                lines.append(f"{where}: unreachable, asked again with backoff: {first}")
                continue
            if not nodes:
                lines.append(f"{where}: connected, no nodes yet")
                continue
            self.store.upsert_cluster(self.cluster_spec(cluster.name, nodes))
            self.store.heartbeat(cluster.name)
            lines.append(f"{where}: {describe_nodes(nodes)}")
        return lines

    def close(self) -> None:
        for name in list(self.backends):
            self._close(name)
