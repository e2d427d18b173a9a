"""Handing leased runs to their clusters' backends.

A run is recorded (``queued → leased``) before it is dispatched, so a crash in between
leaves a leased run that the next cycle — or the next leader — dispatches again; backends
make dispatch idempotent by run id. The outcomes of a batch of dispatches (``leased →
pending``, or failed when a backend rejects the run) wait for the loop's next write
(``writes.py``): with the next pass's reports of those runs, one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from flotilla.backends.interface import (
    BackendUnavailable,
    DispatchRejected,
    DispatchRequest,
    ReplicaPlacement,
)
from flotilla.faults import crash_point
from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.secrets import SecretError, has_secrets
from flotilla.service.context import LoopContext
from flotilla.service.transitions import RunTransitions
from flotilla.store import JobRecord, JobState, Transition
from flotilla.tracing import job_ids, tracer

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, context: LoopContext, transitions: RunTransitions) -> None:
        self._context = context
        self._transitions = transitions
        self._dispatched: set[str] = set()
        """Runs handed to a backend in this term (their ``pending`` may not be synced yet)."""

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
        changes = []
        with tracer().start_as_current_span(
            "flotilla.dispatch", attributes=job_ids(job.id for job in batch)
        ):
            for index, job in enumerate(batch):
                self._context.pace()
                if index and index == len(batch) // 2:
                    crash_point("mid-batch")
                if (change := self._dispatch(job)) is not None:
                    changes.append(change)
            if changes:
                crash_point("after-dispatch")
            self._transitions.record(changes)

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
                for toleration in job.spec.tolerations
            ),
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
            return Transition(job.id, JobState.FAILED, str(error), run.id, message=str(error))
        try:
            backend.dispatch(request)
        except DispatchRejected as error:
            return Transition(
                job.id, JobState.FAILED, f"rejected by {run.cluster}: {error}", run.id
            )
        except BackendUnavailable as error:
            log.warning("dispatch of %s to %s failed, retrying: %s", job.id, run.cluster, error)
            return None
        self._dispatched.add(run.id)
        return Transition(job.id, JobState.PENDING, f"dispatched to {run.cluster}", run.id)


def array_env(job: JobRecord) -> dict[str, str]:
    """An array element's place in its array (nothing for other jobs)."""
    if job.array_id is None or job.spec.array is None:
        return {}
    return {
        "FLOTILLA_ARRAY_ID": job.array_id,
        "FLOTILLA_ARRAY_INDEX": str(job.array_index),
        "FLOTILLA_ARRAY_SIZE": str(job.spec.array.size),
    }
