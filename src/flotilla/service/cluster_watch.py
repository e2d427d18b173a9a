"""Watching the clusters for the loop: each cycle every cluster with a backend here is asked
for its nodes and its runs' news; one silent for longer than the heartbeat timeout becomes
unreachable, and its runs end as a node failure (the lifecycle core says what each job
becomes: re-queued, retried after a backoff, or failed). Runs re-queued while their cluster
was unreachable are stopped when it answers again, and runs another replica dispatched are
asked about once after a failover (adoption).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from flotilla.backends.interface import (
    Backend,
    BackendError,
    BackendUnavailable,
    CancelRequest,
    RunBusy,
    StatusRequest,
    UnknownRun,
)
from flotilla.lifecycle.runs import RunEnd
from flotilla.model import ClusterSpec
from flotilla.model.cluster import GpuSharing
from flotilla.model.node_info import NodeInfo
from flotilla.service.context import LoopContext
from flotilla.service.engines import ClusterUnreachable, level_of
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import ACTIVE_JOB_STATES, ClusterRecord, JobRecord, JobState, Transition

if TYPE_CHECKING:
    from flotilla.service.transitions import RunTransitions

log = logging.getLogger(__name__)

ClusterSpecBuilder = Callable[[ClusterRecord, Sequence[NodeInfo]], ClusterSpec]
"""The cluster as the store keeps it, from its record and the nodes its backend reports."""


def spec_from_record(record: ClusterRecord, nodes: Sequence[NodeInfo]) -> ClusterSpec:
    """Refreshed nodes, everything else as recorded (labels, cost, backend, gpu_sharing,
    topology)."""
    spec = cluster_spec_from_inventory(record.name, record.backend, nodes, labels=record.labels)
    update: dict[str, Any] = {}
    if cost := record.spec.get("cost"):
        update["cost"] = dict(cost)
    if sharing := record.spec.get("gpu_sharing"):
        update["gpu_sharing"] = GpuSharing(sharing)
    if topology := record.spec.get("topology"):
        update["topology"] = list(topology)
    return spec.model_copy(update=update) if update else spec


class ClusterWatch:
    def __init__(
        self,
        context: LoopContext,
        transitions: RunTransitions,
        heartbeat_timeout: float,
        cluster_spec: ClusterSpecBuilder = spec_from_record,
    ) -> None:
        self._context = context
        self._transitions = transitions
        self.heartbeat_timeout = heartbeat_timeout
        """A cluster whose backend has not answered for this long becomes unreachable (the
        fleet's ``settings.heartbeat_timeout`` when it sets one, taken up at each reload)."""
        self._cluster_spec = cluster_spec
        self._inventories: dict[str, tuple[NodeInfo, ...]] = {}
        """Cluster → the nodes last recorded in the store by this replica: a change (a node
        added, drained, resized) is written once, not every cycle."""
        self.unverified: dict[str, str] = {}
        """Job id → run id of runs the store believes active that a backend could not be
        asked about yet (engine unreachable): asked again until it answers."""
        self._orphans: dict[str, set[str]] = {}
        """Cluster → runs re-queued when it became unreachable: stopped when it answers
        again, since the engine may have kept them running. (A new leader's fresh backends
        report every active run on their first poll, which finds the same orphans.)"""
        self._heartbeats: dict[str, float] = {}
        """Cluster → when this replica last recorded its heartbeat (monotonic)."""
        self._lost: set[str] = set()
        """Clusters silent past the heartbeat timeout whose runs this term re-queued (once,
        until the cluster answers again)."""

    def forget(self) -> None:
        self.unverified.clear()
        self._inventories.clear()
        self._lost.clear()

    def observe(self) -> None:
        """Poll every cluster with a backend here and refresh its nodes from its inventory;
        one silent for too long is lost."""
        context = self._context
        now = time.time()
        for record in context.store.list_clusters():
            backend = context.backends.get(record.name)
            if backend is not None:
                try:
                    inventory = backend.inventory()
                    statuses = backend.poll()
                except BackendUnavailable as error:
                    log.log(level_of(error), "cluster %s did not answer: %s", record.name, error)
                    if isinstance(error, ClusterUnreachable) and record.state == "ready":
                        # Known unreachable (said once by its engine's worker): no new run goes
                        # there; its runs are lost only past the heartbeat timeout, below.
                        context.store.set_cluster_state(
                            record.name,
                            "unreachable",
                            reason=f"its engine does not answer: {error}",
                        )
                else:
                    self._lost.discard(record.name)
                    self._heartbeat(record.name)
                    if self._inventories.get(record.name) != inventory.nodes and inventory.nodes:
                        context.store.upsert_cluster(self._cluster_spec(record, inventory.nodes))
                        self._inventories[record.name] = inventory.nodes
                    elif record.state == "unreachable":
                        context.store.set_cluster_state(record.name, "ready")
                    self._transitions.apply_statuses(backend, statuses)
                    self.verify(record.name, backend)
                    self._stop_orphans(record.name, backend)
                    continue
            seen = record.heartbeat_at.timestamp() if record.heartbeat_at else None
            silent = seen is None or now - seen > self.heartbeat_timeout
            if silent and record.name not in self._lost and backend is not None:
                self._lose_cluster(record.name)

    def _heartbeat(self, cluster: str) -> None:
        """Record that ``cluster`` answered, at most every tenth of the heartbeat timeout (and
        at least every second): a heartbeat is a durable write, and one per 0.1 s cycle held
        up the transitions queued behind it."""
        now = time.monotonic()
        every = min(1.0, self.heartbeat_timeout / 10)
        if now - self._heartbeats.get(cluster, float("-inf")) >= every:
            self._context.store.heartbeat(cluster)
            self._heartbeats[cluster] = now

    def _lose_cluster(self, cluster: str) -> None:
        self._lost.add(cluster)
        context = self._context
        context.store.set_cluster_state(
            cluster,
            "unreachable",
            reason=f"its backend has not answered for {self.heartbeat_timeout:g} s",
        )
        reason = f"cluster {cluster} became unreachable"
        read = context.jobdb.read_txn()
        orphans = self._orphans.setdefault(cluster, set())
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                if job.run is not None and job.run.cluster == cluster:
                    if state is not JobState.LEASED:
                        orphans.add(job.run.id)
                    with context.faults.contain("losing its cluster", job.id, job.run.id):
                        self._transitions.record(
                            self._transitions.after_run(job, RunEnd.NODE_FAILURE, reason)
                        )
        self._transitions.flush()

    def _stop_orphans(self, cluster: str, backend: Backend) -> None:
        """Stop the runs re-queued while ``cluster`` was unreachable (it answers again)."""
        for run_id in sorted(self._orphans.pop(cluster, ())):
            try:
                backend.cancel(
                    CancelRequest(run_id, reason=f"superseded: re-queued when {cluster} was lost")
                )
            except BackendUnavailable:
                self._orphans.setdefault(cluster, set()).add(run_id)

    def adopt(self) -> None:
        """A new term: the runs another replica dispatched may never have been reported to
        this replica's backends, so each is asked about once (the backend then watches it
        like its own). An engine that has no record of a run lost it; one that cannot be
        reached is asked again every cycle until it answers."""
        read = self._context.jobdb.read_txn()
        for state in (JobState.PENDING, JobState.RUNNING):
            for job in read.jobs_in_state(state):
                if job.run is not None:
                    self.unverified[job.id] = job.run.id
        for cluster in {job.run.cluster for job in self._jobs(self.unverified) if job.run}:
            backend = self._context.backends.get(cluster)
            if backend is not None:
                self.verify(cluster, backend)

    def _jobs(self, job_ids: Iterable[str]) -> list[JobRecord]:
        read = self._context.jobdb.read_txn()
        return [job for job_id in list(job_ids) if (job := read.get(job_id)) is not None]

    def verify(self, cluster: str, backend: Backend) -> None:
        """Ask ``backend`` about the runs on ``cluster`` not confirmed since this term began."""
        if not self.unverified:
            return
        changes: list[Transition] = []
        for job in self._jobs(self.unverified):
            run_id = self.unverified[job.id]
            if job.run is None or job.run.id != run_id or job.state not in ACTIVE_JOB_STATES:
                del self.unverified[job.id]
                continue
            if job.run.cluster != cluster:
                continue
            try:
                status = backend.status(StatusRequest(run_id))
            except UnknownRun:
                del self.unverified[job.id]
                reason = f"run lost: cluster {cluster} has no record of run {run_id}"
                log.warning("job %s: %s; re-queued", job.id, reason)
                changes += self._transitions.after_run(job, RunEnd.LOST, reason)
                continue
            except RunBusy as error:  # this run only (another process holds it): the others
                log.info("cluster %s: run %s asked again next cycle: %s", cluster, run_id, error)
                continue
            except BackendError as error:
                log.log(
                    level_of(error),
                    "cluster %s: cannot ask about run %s yet: %s",
                    cluster,
                    run_id,
                    error,
                )
                break  # the engine is down: ask again next cycle
            del self.unverified[job.id]
            with self._context.faults.contain("its run's report", job.id, run_id):
                changes += self._transitions.on_run_status(status)
        for job_id in [j for j in self.unverified if self._context.jobdb.read_txn().get(j) is None]:
            del self.unverified[job_id]
        self._transitions.record(changes)
