"""Play a ``ReplayPlan`` against a live service through the SDK client.

The fleet is applied and the replay waits until every cluster of it is ready; then the clock
starts (scenario time 0) and each step is taken when its wall time comes — but never before
the scheduler has run a full cycle since the previous step, as the simulator runs a cycle at
each step's time, nor before the service has placed and ended what the simulator had placed
and ended before that time (the plan's ``Milestones``; for at most ``patience`` wall seconds,
after which the step goes ahead and the difference shows in the report): a service that lags
(a loaded machine, a high speed) sees the scenario's events late, never in another order.
The replay ends as
a simulation does: every job terminal, ``settings.max_time`` reached, or nothing that can
change any more (every step taken, no job running that will end by itself, no queued job
with a timer — a gang timeout or a retry backoff — and the scheduler has run cycles since
the last change without changing anything). What the service recorded is then read back
(``Observed``) and the jobs the replay left unfinished are cancelled, so the service is
ready for the next replay.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flotilla.api.schemas import Cluster, Event, Job, JobDetail
from flotilla.lifecycle.states import ACTIVE_STATE_NAMES, TERMINAL_STATE_NAMES
from flotilla.replay.plan import PlannedJob, ReplayPlan, Step
from flotilla.sdk import Client, NotFound
from flotilla.sdk.calls import JobFilter
from flotilla.sdk.errors import Conflict
from flotilla.sim.simulator import HELD_BY_SCENARIO, RELEASED_BY_SCENARIO

TERMINAL = TERMINAL_STATE_NAMES
READY_LIMIT = 120.0
"""Wall seconds the applied fleet's clusters may take to become ready."""
STATE_POLL = 0.2
"""Wall seconds between two reads of every job's state: the API shares the scheduler's
process, and a replay must not slow down what it measures."""
BARRIER_POLL = 0.02
"""Wall seconds between two reads of the scheduler's cycle number while a step waits."""
START_PATIENCE = 5.0
"""Wall seconds a step waits, past a run's due start, for the service to see it started."""
PACE_PATIENCE = 30.0
"""Wall seconds a step waits for the service to catch up with
the simulation's course before it goes ahead regardless: a bound for a service that
disagrees with the simulator (it never gets there), not a pace."""
QUIET_CYCLES = 3
"""Scheduler cycles without a change after which nothing can change any more."""
Progress = Callable[[float, int, int], None]


class ReplayError(RuntimeError):
    """The service did not do what a replay needs (a cluster never ready, a job id
    missing from a submission's answer)."""


@dataclass
class Observed:
    """What the service recorded, read back at the end of the replay."""

    plan: ReplayPlan
    started_at: float
    """Wall time (epoch seconds) of scenario time 0."""
    end_time: float
    """Scenario time the replay ended at."""
    cutoff: float
    """Wall time (epoch seconds) the replay ended at: what the service did later (while the
    replay read its records back) is not part of the report."""
    end_reason: str
    wall_seconds: float
    ids: dict[str, str]
    """Job name → job id, for every job submitted."""
    details: dict[str, JobDetail] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    clusters: list[Cluster] = field(default_factory=list)
    cycles: int = 0

    def scenario_time(self, epoch: float) -> float:
        return (epoch - self.started_at) * self.plan.speed


def replay(
    client: Client,
    plan: ReplayPlan,
    progress: Progress | None = None,
    patience: float = PACE_PATIENCE,
) -> Observed:
    """Apply, play, wait, read back, clean up. ``patience``: the wall seconds a step waits
    for the service to catch up with the simulation's course (``PACE_PATIENCE``)."""
    apply_fleet(client, plan)
    epoch = time.time()
    start = time.monotonic()
    failed: dict[str, float] = {}
    """Cluster → the wall time it was failed at (the fleet keeps them failed)."""
    newest = client.page(JobFilter(newest_first=True), limit=1).jobs
    after = newest[0].cursor if newest else None
    ids: dict[str, str] = {}
    by_name = {job.name: job for job in plan.jobs}
    steps = list(plan.steps)
    limit = plan.max_time
    quiet_since: tuple[int, tuple[Any, ...]] | None = None
    last_progress = start
    end_reason = ""
    end_time = 0.0
    barrier = 0
    """The scheduler cycle the service must have finished before the next step is taken."""
    looked = -STATE_POLL
    behind = 0.0
    """Scenario seconds the latest step was taken after its time (the service lagged)."""
    pacing: tuple[float, float] | None = None
    """(The step's time, the wall time it began to wait for the simulation's course.)"""
    durations: dict[str, float | None] = {}
    """Job id → its duration in scenario seconds (jobs that end by themselves)."""
    states: dict[str, str] = {}
    done = 0
    while True:
        now = (time.monotonic() - start) * plan.speed
        horizon = now if limit is None else min(now, limit)
        if steps and steps[0].at <= horizon:
            # One step time at a time, each once the service is where the simulator would be
            # at its cycle: the previous step seen, the runs due to end by then ended.
            jobs = _jobs(client, ids, after)
            at = steps[0].at
            if pacing is None or pacing[0] != at:
                pacing = (at, time.monotonic())
            if _ready(client, plan, at, barrier, jobs, epoch, durations) and (
                _caught_up(plan, at, ids, jobs) or time.monotonic() - pacing[1] > patience
            ):
                barrier = _cycle_number(client) + 2
                behind = max(behind, now - steps[0].at)
                _take(client, plan, steps.pop(0), ids, failed)
                durations.update(
                    (job_id, by_name[name].duration)
                    for name, job_id in ids.items()
                    if by_name[name].duration is not None
                )
            else:
                time.sleep(BARRIER_POLL)
            continue
        if limit is not None and now > limit + behind:
            # The replay's clock runs behind the wall by the service's lag (``behind``): its
            # max_time is on that clock, or what was simulated just before it would be cut.
            end_reason, end_time = "settings.max_time", limit
            # The simulation includes the cycle at max_time: so does the replay. (Not paced:
            # waiting here for the simulator's course by max_time lets the service run past
            # it elsewhere — at a load average of 27, 16 stream jobs of
            # backfill-starvation-backfill ended in the wait that the simulator still ran.)
            _await_cycle(client, _cycle_number(client) + 2)
            break
        if time.monotonic() - looked < STATE_POLL:
            _sleep_until_step(plan, steps, start, looked + STATE_POLL)
            continue
        looked = time.monotonic()
        states = {job_id: job.state for job_id, job in _jobs(client, ids, after).items()}
        done = sum(1 for state in states.values() if state in TERMINAL)
        if done == len(plan.jobs) and not steps:
            end_reason = "every job is terminal"
            end_time = _last_change(client, ids, epoch, plan)
            break
        if not steps and _nothing_pending(client, ids, states, by_name):
            cycle = _cycle_number(client)
            fingerprint = tuple(sorted(states.items()))
            if quiet_since is None or quiet_since[1] != fingerprint:
                quiet_since = (cycle, fingerprint)
            elif cycle - quiet_since[0] >= QUIET_CYCLES:
                end_reason = "nothing can change any more"
                end_time = _last_change(client, ids, epoch, plan)
                break
        else:
            quiet_since = None
        if progress is not None and time.monotonic() - last_progress > 0.5:
            last_progress = time.monotonic()
            progress(now, done, len(plan.jobs))
        _sleep_until_step(plan, steps, start, looked + STATE_POLL)
    cutoff = time.time()
    observed = Observed(
        plan=plan,
        started_at=epoch,
        end_time=end_time,
        cutoff=cutoff,
        end_reason=end_reason,
        wall_seconds=time.monotonic() - start,
        ids=ids,
    )
    for name, job_id in ids.items():
        observed.details[name] = client.get(job_id)
        observed.events[name] = list(client.events(job_id))
    observed.clusters = client.clusters()
    observed.cycles = _cycle_number(client)
    cancel_leftovers(client, ids, observed.details)
    return observed


def _take(
    client: Client, plan: ReplayPlan, step: Step, ids: dict[str, str], failed: dict[str, float]
) -> None:
    if step.fail:
        _fail(client, plan, step.fail, failed)
    if step.submit:
        for job in client.submit(step.submit).jobs:
            ids[job.name] = job.id
    for planned in step.cancel:
        if planned.name in ids:
            client.cancel(ids[planned.name], reason="cancelled by the scenario")
    for planned in step.hold:
        if planned.name in ids:
            with contextlib.suppress(Conflict):  # not queued then: the simulator's core
                client.hold(ids[planned.name], reason=HELD_BY_SCENARIO)  # does nothing either
    for planned in step.release:
        if planned.name in ids:
            with contextlib.suppress(Conflict):
                client.release(ids[planned.name], reason=RELEASED_BY_SCENARIO)


def _fail(client: Client, plan: ReplayPlan, names: list[str], failed: dict[str, float]) -> None:
    """Fail the clusters ``names`` now (their ``sim`` backends stop answering) and wait until
    the service has lost them, so that the step's submissions find them gone, as in the
    simulator."""
    now = time.time()
    failed.update((name, now) for name in names)
    apply_fleet(client, plan, plan.failing_fleet(failed), ready=False)
    deadline = time.monotonic() + READY_LIMIT
    while True:
        states = {cluster.name: cluster.state for cluster in client.clusters()}
        if all(states.get(name) == "unreachable" for name in names):
            return
        if time.monotonic() > deadline:
            raise ReplayError(f"the service did not lose the failed clusters: {names}")
        time.sleep(BARRIER_POLL)


def _caught_up(
    plan: ReplayPlan,
    at: float,
    ids: Mapping[str, str],
    jobs: Mapping[str, Job],
) -> bool:
    """Whether the service has placed each job at least as often as the simulator had
    before scenario time ``at``, and ended every job the simulator had ended
    (``Milestones.due``). A service ahead of the simulator is not waited for."""
    if plan.milestones is None:
        return True
    for name, (placed, ended) in plan.milestones.due(at).items():
        job = jobs.get(ids.get(name, ""))
        if job is None:
            return False
        runs = job.run.attempt if job.run is not None else 0
        if runs < placed or (ended and job.state not in TERMINAL):
            return False
    return True


def _await_cycle(client: Client, number: int) -> None:
    """Until the scheduler has finished cycle ``number``."""
    deadline = time.monotonic() + READY_LIMIT
    while _cycle_number(client) < number:
        if time.monotonic() > deadline:
            raise ReplayError(f"the scheduler did not run a cycle in {READY_LIMIT:g}s")
        time.sleep(0.01)


def clusters_it_would_replace(client: Client) -> list[str]:
    """The service's clusters run by a real engine that applying a replay's fleet would
    remove or turn into ``sim`` ones (a replay's clusters are all ``sim``): ``cluster
    (backend)`` each. A replay
    against a service people use would take its clusters away; the CLI refuses unless told."""
    return [
        f"{cluster.name} ({cluster.backend})"
        for cluster in client.clusters()
        if cluster.backend != "sim"
    ]


def apply_fleet(
    client: Client,
    plan: ReplayPlan,
    fleet: Mapping[str, Any] | None = None,
    *,
    ready: bool = True,
) -> None:
    """Apply the scenario's fleet (``fleet``, else the plan's), keeping the queues of the
    fleet in force it does not name (without their quota): a queue that holds jobs cannot be
    removed, and a service that ran an earlier replay holds them. ``ready``: wait until
    every cluster of it is ready."""
    document = dict(plan.fleet if fleet is None else fleet)
    try:
        current = client.fleet()["fleet"]
    except NotFound:  # the service runs its embedded default: nothing to keep
        current = {}
    named = {queue["name"] for queue in document["queues"]}
    kept = [
        {key: value for key, value in queue.items() if key != "quota"}
        for queue in current.get("queues", [])
        if queue["name"] not in named
    ]
    document["queues"] = [*kept, *document["queues"]]
    client.apply_fleet(document)
    if not ready:
        return
    wanted = {cluster["name"] for cluster in document["clusters"]}
    deadline = time.monotonic() + READY_LIMIT
    while True:
        states = {cluster.name: cluster.state for cluster in client.clusters()}
        if all(states.get(name) == "ready" for name in wanted):
            return
        if time.monotonic() > deadline:
            waiting = ", ".join(f"{n} ({states.get(n, 'absent')})" for n in sorted(wanted))
            raise ReplayError(f"the fleet's clusters did not become ready: {waiting}")
        time.sleep(0.05)


def cancel_leftovers(client: Client, ids: Mapping[str, str], details: Mapping[str, Any]) -> None:
    """Cancel every job the replay left unfinished and wait until each has ended."""
    left = [ids[name] for name, detail in details.items() if detail.state not in TERMINAL]
    for job_id in left:
        client.cancel(job_id, reason="the replay ended")
    if left:
        client.wait_all(left, timeout=READY_LIMIT)


def _sleep_until_step(plan: ReplayPlan, steps: list[Step], start: float, until: float) -> None:
    """Sleep until ``until`` (monotonic), or the next step's time if that comes first."""
    wake = until
    if steps:
        wake = min(wake, start + plan.wall(steps[0].at))
    time.sleep(max(0.0, wake - time.monotonic()))


def _jobs(client: Client, ids: Mapping[str, str], after: int | None) -> dict[str, Job]:
    """Each submitted job by id: the jobs submitted after ``after``, page by page."""
    if not ids:
        return {}
    wanted = set(ids.values())
    found: dict[str, Job] = {}
    while True:
        page = client.page(after=after, limit=500)
        found.update((job.id, job) for job in page.jobs if job.id in wanted)
        if page.next_cursor is None:
            return found
        after = page.next_cursor


def _ready(
    client: Client,
    plan: ReplayPlan,
    at: float,
    barrier: int,
    jobs: Mapping[str, Job],
    epoch: float,
    durations: Mapping[str, float | None],
) -> bool:
    """Whether the step at scenario time ``at`` may be taken: the scheduler finished the
    cycle ``barrier``, no run that started with a ``duration`` ending by ``at`` is still
    running (the simulator frees those before its cycle at ``at``), and no run placed long
    enough ago to have started by ``at`` (its cluster's ``startup_delay``) is still waiting
    to be seen started (the simulator starts those before its cycle at ``at``; a cluster that
    fails at ``at`` would otherwise fail a run the simulator had started as one that never
    did) — unless it has waited ``START_PATIENCE`` longer than that."""
    if _cycle_number(client) < barrier:
        return False
    by = epoch + plan.wall(at) + 1e-6
    delays = {cluster.name: cluster.startup_delay for cluster in plan.scenario.clusters}
    now = time.time()
    for job in jobs.values():
        run = job.run
        if job.state in ("leased", "pending") and run is not None:
            due = run.created_at.timestamp() + plan.wall(delays.get(run.cluster, 0.0))
            if due <= by and now < due + START_PATIENCE:
                return False
    for job in jobs.values():
        run, duration = job.run, durations.get(job.id)
        if job.state in TERMINAL or duration is None or run is None or run.started_at is None:
            continue
        if run.started_at.timestamp() + plan.wall(duration) <= by:
            return False
    return True


def _nothing_pending(
    client: Client, ids: Mapping[str, str], states: Mapping[str, str], jobs: Mapping[str, Any]
) -> bool:
    """No job can change by itself: none runs with a duration (it will end), none queued
    waits out a gang timeout or a retry backoff."""
    by_id = {job_id: jobs[name] for name, job_id in ids.items()}
    for job_id, state in states.items():
        if state in TERMINAL:
            continue
        planned: PlannedJob = by_id[job_id]
        if state in ACTIVE_STATE_NAMES:
            if planned.duration is not None:
                return False
            continue
        detail = client.get(job_id)
        if detail.not_before is not None or (detail.spec.get("gang") or None) is not None:
            return False
    return True


def _cycle_number(client: Client) -> int:
    scheduler = client.report().scheduler or {}
    return int(scheduler.get("number", 0))


def _last_change(client: Client, ids: Mapping[str, str], epoch: float, plan: ReplayPlan) -> float:
    """Scenario time of the last job event: where the simulation would have stopped."""
    latest = 0.0
    for job_id in ids.values():
        for event in client.events(job_id):
            latest = max(latest, event.time.timestamp())
    return max(0.0, (latest - epoch) * plan.speed) if latest else 0.0
