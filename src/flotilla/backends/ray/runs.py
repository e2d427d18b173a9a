"""A run as Ray has it: its replicas' Ray jobs (``RunView``), and its status composed from
theirs (``compose``). Pure functions of what Ray answered, so two backend objects reading the
same Ray jobs report the same run."""

from __future__ import annotations

from dataclasses import dataclass

from flotilla.backends.interface import (
    BackendRunState,
    DispatchResult,
    ReplicaPlacement,
    ReplicaStatus,
    RunStatus,
)
from flotilla.backends.ray.jobs import Marker, RayReplica, describe_failure, submission_id


@dataclass(frozen=True)
class RunView:
    """What Ray says of one run: its replicas' Ray jobs, in placement order."""

    run_id: str
    replicas: tuple[RayReplica, ...]

    @property
    def markers(self) -> tuple[Marker, ...]:
        return tuple(replica.marker for replica in self.replicas)

    @property
    def placements(self) -> tuple[ReplicaPlacement, ...]:
        return tuple(marker.placement for marker in self.markers)

    @property
    def complete(self) -> bool:
        """Every replica was submitted (a dispatch or a growth interrupted half-way is not):
        each replica's marker counts the run's replicas when it was submitted, so a grown
        run's last replicas say how many it has."""
        return len(self.replicas) == max(marker.replicas for marker in self.markers)

    def result(self) -> DispatchResult:
        first = self.markers[0]
        return DispatchResult(
            run_id=self.run_id,
            job=first.job,
            cluster=first.cluster,
            dispatched_at=min(marker.dispatched_at for marker in self.markers),
            placements=self.placements,
        )


def compose(view: RunView, cluster: str, reason: str | None, now: float) -> RunStatus:
    """The run's status from its replicas' Ray jobs. ``reason``: why this backend object
    stopped it (``None`` when it did not); ``now``: the end of a run Ray gives no end time."""

    replicas = view.replicas
    first = view.markers[0]
    dispatched_at = min(marker.dispatched_at for marker in view.markers)
    states = [replica.state for replica in replicas]
    # A half-dispatched run is completed by the next dispatch, unless it was cancelled.
    terminal = (view.complete or reason is not None) and all(s.terminal for s in states)
    started = [
        r.start_time
        for r in replicas
        if r.start_time
        and (r.state is BackendRunState.RUNNING or (r.state.terminal and r.driver_started))
    ]
    started_at = max(min(started), dispatched_at) if started else None
    finished_at: float | None = None
    exit_code: int | None = None
    message = ""
    if not terminal:
        state = (
            BackendRunState.RUNNING
            if BackendRunState.RUNNING in states
            else BackendRunState.PENDING
        )
        if reason is not None:
            message = f"stopping: {reason}"
    else:
        ends = [r.end_time for r in replicas if r.end_time]
        finished_at = max(max(ends), started_at or dispatched_at) if ends else now
        timed_out = next((r for r in replicas if r.timed_out), None)
        failed = next((r for r in replicas if r.state is BackendRunState.FAILED), None)
        lost = next((r for r in replicas if r.state is BackendRunState.LOST), None)
        if reason is not None and BackendRunState.CANCELLED in states:
            state, message = BackendRunState.CANCELLED, reason
        elif timed_out is not None:
            state, exit_code, message = (
                BackendRunState.FAILED,
                timed_out.exit_code,
                describe_failure(timed_out),
            )
        elif failed is not None:
            state, exit_code = BackendRunState.FAILED, failed.exit_code
            message = describe_failure(failed)
        elif lost is not None:
            state = BackendRunState.LOST
            message = f"replica {lost.marker.placement.label}: Ray reports {lost.ray_status}"
        elif BackendRunState.CANCELLED in states:
            stopped = next(r for r in replicas if r.state is BackendRunState.CANCELLED)
            state = BackendRunState.CANCELLED
            message = reason or f"stopped on Ray: {stopped.message or 'stop_job'}"
        else:
            state, exit_code = BackendRunState.SUCCEEDED, 0
    if started_at is not None and finished_at is not None:
        finished_at = max(finished_at, started_at)
    return RunStatus(
        run_id=view.run_id,
        job=first.job,
        cluster=cluster,
        state=state,
        dispatched_at=dispatched_at,
        started_at=started_at,
        finished_at=finished_at,
        exit_code=exit_code,
        message=message,
        replicas=tuple(
            ReplicaStatus(
                task=replica.marker.task,
                replica=replica.marker.replica,
                node=replica.marker.node,
                state=replica.state,
                exit_code=replica.exit_code,
                engine_id=submission_id(
                    cluster, view.run_id, replica.marker.task, replica.marker.replica
                ),
            )
            for replica in replicas
        ),
    )
