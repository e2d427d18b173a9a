"""Handing leased runs to their clusters' backends.

A run is recorded (``queued → leased``) before it is dispatched, so a crash in between
leaves a leased run that the next cycle — or the next leader — dispatches again; backends
make dispatch idempotent by run id. The outcomes of a batch of dispatches (``leased →
pending``, or failed when a backend rejects the run) wait for the loop's next write
(``writes.py``): with the next pass's reports of those runs, one transaction.

A cancel recorded while a run is leased is honoured before its dispatch: each run is checked
right before it is handed over, against the cancels the API in this process handed to the loop
(at once) and the JobDb, read again from the store while a batch takes longer than
``RESYNC_SECONDS`` (a cancel committed by another process). The run is then never dispatched;
the cancel path finds the backend has no such run and records the job ``cancelled``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from flotilla.backends.interface import (
    BackendUnavailable,
    DispatchRejected,
    DispatchRequest,
    ReplicaPlacement,
)
from flotilla.faults import crash_point
from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.lifecycle import machine
from flotilla.lifecycle.events import DispatchAccepted, DispatchRefused
from flotilla.secrets import SecretError, has_secrets
from flotilla.service.context import LoopContext
from flotilla.service.engines import level_of
from flotilla.service.retry import change_for, view_of
from flotilla.service.transitions import RunTransitions
from flotilla.store import TERMINAL_JOB_STATES, JobRecord, JobState, Transition
from flotilla.tracing import job_ids, tracer

log = logging.getLogger(__name__)

RESYNC_SECONDS = 0.05
"""A dispatch batch that has run this long since the JobDb was last brought up to date reads
the change feed again before its next dispatch, so a cancel another process committed
meanwhile is seen (a feed read costs a fraction of this)."""


class Dispatcher:
    def __init__(
        self,
        context: LoopContext,
        transitions: RunTransitions,
        sync: Callable[[], None] = lambda: None,
    ) -> None:
        self._context = context
        self._transitions = transitions
        self._sync = sync
        """Brings the JobDb up to date with the store (the loop's change-feed read)."""
        self._dispatched: set[str] = set()
        """Runs handed to a backend in this term (their ``pending`` may not be synced yet)."""
        self._cancels: set[str] = set()
        """Jobs whose cancel the API in this process committed, maybe not in the JobDb yet
        (added by the API's threads, read and pruned by the loop's: single set operations)."""

    def note_cancelled(self, job_ids: Iterable[str]) -> None:
        """The API committed cancels of these jobs: none of their runs may be dispatched."""
        self._cancels.update(job_ids)

    def forget(self) -> None:
        """A new term: dispatch again whatever is still leased (idempotent by run id)."""
        self._dispatched.clear()

    def dispatch_leased(self) -> None:
        """Dispatch the leased runs not handed over yet (a crash or a failed dispatch)."""
        self.dispatch_all(
            job
            for job in self._context.jobdb.read_txn().jobs_in_state(JobState.LEASED)
            if job.run is not None
            and job.run.id not in self._dispatched
            and not job.cancel_requested
        )

    def dispatch_all(self, jobs: Iterable[JobRecord]) -> None:
        """Dispatch each job's run; every outcome waits for the next flush of the cycle's
        writes (one write per job made dispatch the slowest part of a cycle)."""
        batch = list(jobs)
        if not batch:
            return
        self._prune_cancels()
        changes = []
        synced = time.monotonic()  # the callers read the JobDb just before
        with tracer().start_as_current_span(
            "flotilla.dispatch", attributes=job_ids(job.id for job in batch)
        ):
            try:
                for index, job in enumerate(batch):
                    self._context.pace()
                    if index and index == len(batch) // 2:
                        crash_point("mid-batch")
                    if time.monotonic() - synced > RESYNC_SECONDS:
                        self._sync()
                        synced = time.monotonic()
                    if not self._still_to_dispatch(job):
                        continue
                    run_id = job.run.id if job.run is not None else None
                    with self._context.faults.contain("its dispatch", job.id, run_id):
                        if (change := self._dispatch(job)) is not None:
                            changes.append(change)
                if changes:
                    crash_point("after-dispatch")
            finally:
                self._transitions.record(changes)

    def _still_to_dispatch(self, job: JobRecord) -> bool:
        """Whether the job's run is still leased, with no cancel requested (a cancel that came
        after the batch was read: the run must not start)."""
        if job.id in self._cancels:
            return False
        current = self._context.jobdb.read_txn().get(job.id)
        if current is None or current.serial < job.serial:
            current = job
        return (
            current.state is JobState.LEASED
            and not current.cancel_requested
            and current.run is not None
            and job.run is not None
            and current.run.id == job.run.id
        )

    def _prune_cancels(self) -> None:
        """Forget the handed-over cancels of jobs that ended (they can never be leased)."""
        if not self._cancels:
            return
        read = self._context.jobdb.read_txn()
        for job_id in list(self._cancels):
            job = read.get(job_id)
            if job is not None and job.state in TERMINAL_JOB_STATES:
                self._cancels.discard(job_id)

    def _open(self, job: JobRecord) -> Any:
        """The payload with its secret env values in clear, for the backend only."""
        payload = job.spec.payload
        if not has_secrets(payload):
            return payload
        secrets = self._context.secrets
        if secrets is None:
            raise SecretError(
                ["payload.env: the job has secret values and this scheduler has no secret key"]
            )
        return secrets.open(payload)

    def request_for(self, job: JobRecord) -> DispatchRequest:
        """The dispatch of ``job``'s run as it stands (every placement of its assignment);
        raises ``SecretError`` when its secret values cannot be opened here."""
        run = job.run
        assert run is not None
        asked = job.spec.preemption
        request = DispatchRequest(
            run_id=run.id,
            job=job.id,
            cluster=run.cluster,
            placements=tuple(
                ReplicaPlacement(item.task, item.replica, item.node, item.gpus)
                for item in AssignmentRecord.unmarshal(run.assignment).placements
            ),
            payload=self._open(job),
            job_type=job.spec.type,
            env={"FLOTILLA_QUEUE": job.queue, "FLOTILLA_JOB_NAME": job.name, **array_env(job)},
            max_runtime=job.spec.max_runtime,
            resources={task.name: dict(task.resources) for task in job.spec.tasks},
            labels=dict(job.spec.labels),
            tolerations=tuple(
                toleration.model_dump(mode="json", exclude_none=True)
                for toleration in job.spec.tolerated()
            ),
            queue=job.queue,
            owner=job.owner,
            # Ray fixes a run's stop signal and grace when it starts it (docs/backends.md).
            preemption_signal=None if asked is None else asked.signal,
            preemption_grace=None if asked is None else asked.grace,
        )
        return request

    def _dispatch(self, job: JobRecord) -> Transition | None:
        """Hand the run to its backend; the transition that records what happened, if any."""
        run = job.run
        assert run is not None
        backend = self._context.backends.get(run.cluster)
        if backend is None:
            return None
        try:
            request = self.request_for(job)
        except SecretError as error:
            refused = machine.step(view_of(job), DispatchRefused(str(error)))
            return change_for(job.id, refused, run.id, message=str(error))
        try:
            backend.dispatch(request)
        except DispatchRejected as error:
            why = f"rejected by {run.cluster}: {error}"
            return change_for(job.id, machine.step(view_of(job), DispatchRefused(why)), run.id)
        except BackendUnavailable as error:
            log.log(
                level_of(error),
                "dispatch of %s to %s failed, retrying: %s",
                job.id,
                run.cluster,
                error,
            )
            return None
        self._dispatched.add(run.id)
        return change_for(job.id, machine.step(view_of(job), DispatchAccepted(run.cluster)), run.id)


def array_env(job: JobRecord) -> dict[str, str]:
    """An array element's place in its array (nothing for other jobs)."""
    if job.array_id is None or job.spec.array is None:
        return {}
    return {
        "FLOTILLA_ARRAY_ID": job.array_id,
        "FLOTILLA_ARRAY_INDEX": str(job.array_index),
        "FLOTILLA_ARRAY_SIZE": str(job.spec.array.size),
    }
