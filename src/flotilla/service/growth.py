"""Non-strict gangs that grow while they run: the engine's growth decisions applied to the
store and the backends.

A non-strict gang (``gang.mode: non-strict``, ``min_member`` below its replicas) starts with
the replicas that fit; each later round's growth pass places more of the rest on the same
cluster (``scheduler/algorithm.py``). Such a decision names a job that is already active. It
is recorded first — the run's assignment becomes the old placements and the new, the job a
``expanded`` event (``Store.grow_run``), so every snapshot after it counts the new replicas'
nodes — and then handed to the run's backend (``ReplicaGrowth.add_replicas``, idempotent by
task and replica). A run still leased (not dispatched yet) gets every placement at its
dispatch. A backend that cannot be reached gets the growth again at the next commit; a crash
between the record and the backend call leaves a run with fewer replicas than recorded, and
a new term hands every growing run to its backend again (``repair``).

A backend that cannot add replicas (``can_grow``) gets no growth: the job runs with the
replicas it has, and ``describe`` says why the rest wait. The service refuses such a job at
submission when no cluster it may run on can grow it (``server/feasibility.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flotilla.backends.interface import (
    BackendError,
    BackendUnavailable,
    DispatchRejected,
    ReplicaGrowth,
    UnknownRun,
    can_grow,
)
from flotilla.framework.snapshot import ScheduledJob
from flotilla.lifecycle import gangs
from flotilla.lifecycle.effects import GrowRun
from flotilla.secrets import SecretError
from flotilla.service.context import LoopContext
from flotilla.service.dispatch import Dispatcher
from flotilla.service.engines import level_of
from flotilla.store import ACTIVE_JOB_STATES, JobRecord, JobState, StaleRunError

log = logging.getLogger(__name__)


class Growth:
    def __init__(self, context: LoopContext, dispatcher: Dispatcher) -> None:
        self._context = context
        self._dispatcher = dispatcher
        self.waiting: dict[str, str] = {}
        """Job id → why a running gang's other replicas wait (the last round's word)."""
        self.incomplete: set[str] = set()
        """Active non-strict gangs with replicas still to place (or a growth still to hand
        over), as the last commit knew them: in async mode a round is triggered for them even
        with nothing queued, and its commit hands the growth over again."""
        self._repaired: int | None = None
        """The lease's fencing token of the term whose growing runs were handed over."""
        self.unhanded: set[str] = set()
        """Jobs whose growth is recorded but their backend could not be reached: handed over
        again at each commit until it answers."""

    def grow(self, decisions: Iterable[tuple[JobRecord, ScheduledJob, GrowRun]]) -> list[str]:
        """Record each growth the lifecycle core called for (``GrowRun``, with its reason) and
        hand it to the run's backend; the ids of the jobs grown."""
        grown: list[str] = []
        for record, decision, growth in decisions:
            run = record.run
            if run is None or record.state not in ACTIVE_JOB_STATES:
                continue
            backend = self._context.backends.get(run.cluster)
            if backend is None or not can_grow(backend):
                name = backend.name if backend is not None else "none"
                self.waiting[record.id] = gangs.members_wait_reason(
                    len(run.assignment.get("placements", [])),
                    gangs.wanted_replicas(record.spec),
                    f"cluster {run.cluster}'s backend ({name}) cannot add replicas to a "
                    "running run",
                )
                continue
            placements = [*run.assignment.get("placements", [])]
            placements += decision.assignment.to_json()["placements"]
            assignment = {**run.assignment, "placements": placements}
            try:
                self._context.store.grow_run(
                    record.id, run.id, assignment, growth.reason, fence=self._context.lease
                )
            except StaleRunError as error:
                log.info("growth of %s no longer applies: %s", record.id, error)
                continue
            grown.append(record.id)
        return grown

    def hand_over(self, job_ids: Iterable[str]) -> None:
        """Give the grown runs (as the JobDb now holds them) to their backends."""
        read = self._context.jobdb.read_txn()
        for job_id in job_ids:
            job = read.get(job_id)
            if job is not None:
                self._add_replicas(job)
            else:
                self.unhanded.discard(job_id)

    def repair(self) -> None:
        """Once per term: every dispatched run of a growing gang goes to its backend again,
        so replicas recorded before a crash but never started are started."""
        if self.unhanded:
            self.hand_over(list(self.unhanded))
        lease = self._context.lease
        term = None if lease is None else lease.token
        if term is None or self._repaired == term:
            return
        self._repaired = term
        read = self._context.jobdb.read_txn()
        for state in (JobState.PENDING, JobState.RUNNING):
            for job in read.jobs_in_state(state):
                if gangs.may_grow(job.spec):
                    self._add_replicas(job)

    def _add_replicas(self, job: JobRecord) -> None:
        self.unhanded.discard(job.id)
        run = job.run
        if run is None or job.state not in (JobState.PENDING, JobState.RUNNING):
            return  # a leased run gets every placement when it is dispatched
        backend = self._context.backends.get(run.cluster)
        if backend is None or not can_grow(backend):
            return
        assert isinstance(backend, ReplicaGrowth)
        try:
            backend.add_replicas(self._dispatcher.request_for(job))
        except (UnknownRun, DispatchRejected, SecretError) as error:
            log.warning("run %s of job %s cannot grow: %s", run.id, job.id, error)
        except BackendUnavailable as error:
            log.log(level_of(error), "growth of %s waits for %s: %s", job.id, run.cluster, error)
            self.unhanded.add(job.id)  # asked again at the next commit
        except BackendError as error:  # pragma: no cover - a backend's own failure
            log.warning("growth of %s failed on %s: %s", job.id, run.cluster, error)
