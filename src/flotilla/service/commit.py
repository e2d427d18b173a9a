"""Committing a scheduling round's decisions: evictions, then growth, leases and dispatch.

Evictions stop their runs (the job is re-queued when the backend confirms the stop); a
victim keeps its nodes until then, and its preemptor is not leased but held out of the
backlog until every victim's run stopped (``victims.py``, the lifecycle core's rule in
``lifecycle/preemption.py``); the next round places it. The leases of
a round are recorded in one fenced transaction (``queued → leased``, one run each), with the
transitions that wait for it (``writes.py``), and then dispatched. A running non-strict gang
that took more replicas is recorded and handed to its backend (``growth.py``). In async mode,
decisions that no longer fit the current node tables are dropped and their jobs wait for the
next round, with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from flotilla.backends.interface import CancelOutcome
from flotilla.faults import crash_point
from flotilla.framework.snapshot import CycleResult, ScheduledJob
from flotilla.lifecycle import machine
from flotilla.lifecycle.effects import GrowRun
from flotilla.lifecycle.events import Evicted
from flotilla.lifecycle.preemption import victims_of
from flotilla.lifecycle.rounds import evictions, placements
from flotilla.service import effects
from flotilla.service.context import LoopContext
from flotilla.service.dispatch import Dispatcher
from flotilla.service.growth import Growth
from flotilla.service.retry import view_of
from flotilla.service.snapshots import CurrentState, LoopSnapshot
from flotilla.service.transitions import RunTransitions, preemption_request
from flotilla.service.writes import CycleWrites
from flotilla.store import (
    ACTIVE_JOB_STATES,
    JobRecord,
    JobState,
    RunRequest,
)
from flotilla.tracing import job_ids, tracer

log = logging.getLogger(__name__)


class Committer:
    def __init__(
        self,
        context: LoopContext,
        transitions: RunTransitions,
        dispatcher: Dispatcher,
        writes: CycleWrites,
    ) -> None:
        self._context = context
        self._writes = writes
        self._transitions = transitions
        self._dispatcher = dispatcher
        self.growth = Growth(context, dispatcher)

    def commit(
        self,
        result: CycleResult,
        state: LoopSnapshot,
        *,
        dropped: Mapping[str, str] | None = None,
    ) -> None:
        stopping = self._evict(result)
        requests, growing = self._run_requests(result, state, dropped, stopping)
        context = self._context
        self._grow(growing)
        self.growth.incomplete = (
            set(result.growing)
            | self.growth.unhanded
            | {
                decision.job.name
                for decision in result.scheduled
                if decision.job.gang is not None
                and len(decision.assignment.placements) < decision.job.replica_count
            }
        )
        if requests:
            with tracer().start_as_current_span("flotilla.schedule") as span:
                requests = self._writes.flush(requests)
                span.set_attributes(
                    {
                        **job_ids(request.job_id for request in requests),
                        "flotilla.clusters": sorted({r.cluster for r in requests}),
                        "flotilla.pending": len(result.pending),
                    }
                )
            crash_point("after-lease-commit")
            fresh = context.jobdb.read_txn()
            leased = [
                job
                for request in requests
                if (job := fresh.get(request.job_id)) is not None and job.state is JobState.LEASED
            ]
            self._observe_waits(leased)
            self._dispatcher.dispatch_all(leased)
        context.metrics.decisions.labels(outcome="scheduled").inc(len(requests))
        context.metrics.decisions.labels(outcome="unschedulable").inc(len(result.pending))
        reasons = dict(state.reasons)
        reasons.update(result.pending)
        reasons.update(result.growing)
        reasons.update(self.growth.waiting)
        self.growth.waiting.clear()
        for name, why in (dropped or {}).items():
            reasons[name] = f"decision dropped: {why}"
        context.reasons = reasons

    def _observe_waits(self, leased: list[JobRecord]) -> None:
        """Each first attempt's wait, from submission to this lease, per queue."""
        for job in leased:
            if job.run is not None and job.run.attempt == 1:
                waited = (job.run.created_at - job.submitted_at).total_seconds()
                self._context.metrics.queue_wait.labels(queue=job.queue).observe(max(0.0, waited))

    def _evict(self, result: CycleResult) -> dict[str, list[JobRecord]]:
        """Stop the victims' runs; by preemptor (a job, or a named gang), the victims whose
        runs still stop."""
        context = self._context
        read = context.jobdb.read_txn()
        stopping: dict[str, list[JobRecord]] = {}
        for evict in evictions(result):
            victim = read.get(evict.job)
            if victim is None or victim.run is None or victim.state not in ACTIVE_JOB_STATES:
                continue
            with context.faults.contain("its eviction", victim.id, victim.run.id):
                if self._evict_one(victim, evict.event):
                    stopping.setdefault(evict.by, []).append(victim)
        return stopping

    def _evict_one(self, victim: JobRecord, evicted: Evicted) -> bool:
        """Stop ``victim``'s run; True while it still stops (it keeps its nodes till then)."""
        context = self._context
        run = victim.run
        assert run is not None
        gone = True
        answer = effects.read(machine.step(view_of(victim), evicted))
        if answer.stop is not None:
            self._transitions.awaiting_stop[run.id] = victim.id
            backend = context.backends.get(run.cluster)
            if backend is not None:
                asked = preemption_request(run.id, victim.spec, answer.stop.reason)
                outcome = backend.cancel(asked).outcome
                gone = outcome in (CancelOutcome.UNKNOWN_RUN, CancelOutcome.ALREADY_FINISHED)
        if answer.state is not None:
            self._transitions.transition(
                victim.id, answer.state.state, answer.state.reason, run=run.id
            )
        context.metrics.preemptions.labels(queue=victim.queue).inc()
        if gone and run.id in self._transitions.awaiting_stop:
            self._transitions.requeue_preempted(run.id)  # nothing left to stop: room now
            return False
        return run.id in self._transitions.awaiting_stop

    def _grow(self, growing: list[tuple[JobRecord, ScheduledJob, GrowRun]]) -> None:
        """Non-strict gangs that took more replicas (``growth.py``): recorded, the JobDb
        brought up to date (the next snapshot counts their nodes), then handed over."""
        self.growth.repair()
        if not growing:
            return
        grown = self.growth.grow(growing)
        if grown:
            self._writes.sync()
            self.growth.hand_over(grown)

    def _run_requests(
        self,
        result: CycleResult,
        state: LoopSnapshot,
        dropped: Mapping[str, str] | None,
        stopping: Mapping[str, list[JobRecord]],
    ) -> tuple[list[RunRequest], list[tuple[JobRecord, ScheduledJob, GrowRun]]]:
        """The leases of the queued jobs decided, and the running gangs that grew: what the
        lifecycle core makes of each decision (``Scheduled``: ``StartRun`` or ``GrowRun``).
        A job placed by preempting victims whose runs still stop is not leased: it waits for
        them, and every other decision must fit beside the room they still hold."""
        read = self._context.jobdb.read_txn()
        checked = dropped is not None or bool(stopping)
        current = CurrentState(self._context.jobdb, state) if checked else None
        requests = []
        growing: list[tuple[JobRecord, ScheduledJob, GrowRun]] = []
        for place in placements(result):
            record, decision = read.get(place.job), place.decision
            if record is None:
                continue
            answer = effects.read(machine.step(view_of(record), place.event))
            if answer.grow is not None:
                with self._context.faults.contain("recording its growth", record.id):
                    if current is None or current.room_for(decision.assignment) is None:
                        growing.append((record, decision, answer.grow))
                continue
            start = answer.start
            if start is None or record.state is not JobState.QUEUED:
                continue  # a preempted job is re-queued before the service leases it again
            gang = decision.job.gang
            victims = victims_of(stopping, record.id, gang.name if gang is not None else None)
            if victims:
                state.reasons[record.id] = self._context.holds.wait(record.id, list(victims))
                continue
            with self._context.faults.contain("recording its placement", record.id):
                if current is not None:
                    unfit = current.room_for(decision.assignment)
                    if unfit is not None:
                        state.reasons[record.id] = f"decision dropped: {unfit}"
                        continue
                requests.append(
                    RunRequest(
                        job_id=record.id,
                        cluster=start.cluster,
                        assignment=decision.assignment.to_json(),
                        reason=start.reason,
                    )
                )
        return requests, growing
