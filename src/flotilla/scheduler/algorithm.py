"""One scheduling round over a snapshot: order jobs fairly, admit, place, preempt, explain.

The same ``SchedulingAlgorithm`` serves the simulator, the service and the tests. It reads a
``SchedulingSnapshot`` and returns a ``CycleResult``; applying the result is the caller's job.

Per job, in fair-share order: PreFilter (quota, gang readiness) → the assignment strategy picks
a cluster, placing with Filter/Score/Reserve → Permit → commit. A job that cannot be placed
may preempt (PostFilter) or, with backfill, reserve the earliest time it will fit. A job
refused only by a soft limit (runtime quota) is retried once every queue had its turn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from operator import attrgetter

from flotilla.framework.interfaces import (
    Assignment,
    AssignmentStrategy,
    Decision,
    Placement,
    PostFilterInput,
    PostFilterPlugin,
    no_cluster_reason,
)
from flotilla.framework.jobs import (
    GANG_TASK_SEPARATOR,
    SchedulingJob,
    combine_gang,
    remaining_replicas,
)
from flotilla.framework.owners import owner_of
from flotilla.framework.registry import Framework, load_strategy
from flotilla.framework.snapshot import (
    PRIORITY_ORDER,
    CycleResult,
    CycleStats,
    PendingReasons,
    SchedulingConfig,
    SchedulingSnapshot,
)
from flotilla.lifecycle import gangs
from flotilla.model.job import GangMode
from flotilla.model.scenario import FairShare, Queueing
from flotilla.scheduler.backfill import find_reservation
from flotilla.scheduler.caches import EngineCaches
from flotilla.scheduler.decayed_usage import DecayedUsage, queue_allocations
from flotilla.scheduler.ordering import DrfOrder, FifoOrder, alike, sort_queues
from flotilla.scheduler.owner_order import owner_allocations
from flotilla.scheduler.precedence import Precedence
from flotilla.scheduler.runner import RoundCancelled
from flotilla.scheduler.scheduling_round import Outcome, SchedulingRound

NO_CAPACITY_REASON = "no cluster has capacity: none has answered with its nodes yet"
"""Why every job waits while no cluster has reported any nodes (every engine unreachable, a
wrong address or credentials): a reason, not an error, and no round to run."""


class SchedulingAlgorithm:
    """Fair ordering + assignment strategy + plugin framework, composed once per config."""

    def __init__(
        self,
        config: SchedulingConfig,
        framework: Framework | None = None,
        strategy: AssignmentStrategy | None = None,
        *,
        fast_paths: bool = True,
    ) -> None:
        """``fast_paths=False`` is the reference mode: the same decisions and reasons, found
        without the engine's caches (``scheduler.caches``); the equivalence tests compare."""
        self.config = config
        self.framework = framework or Framework.from_profile(
            config.profile, config.enabled_plugins, config.disabled_plugins
        )
        self.strategy = strategy or load_strategy(config.assignment_strategy)
        self.caches = EngineCaches(self.framework, fast_paths=fast_paths)
        """The speed machinery this engine owns and hands to each round."""
        self.sort_queue = self.framework.queue_sort.sort
        self.priority_order = self.framework.queue_sort.name == PRIORITY_ORDER
        self.usage: DecayedUsage | None = None
        """Decayed usage per queue (``usage_half_life``), fed by the rounds this engine runs."""
        if config.usage_half_life is not None and config.fair_share is FairShare.DRF:
            self.usage = DecayedUsage(config.usage_half_life)

    def schedule(
        self,
        snapshot: SchedulingSnapshot,
        cancel: threading.Event | None = None,
        precedence: Precedence | None = None,
    ) -> CycleResult:
        """Decide on ``snapshot``. Setting ``cancel`` stops the round with ``RoundCancelled``;
        with ``precedence``, the round pauses between jobs while urgent work of other threads
        is under way (``scheduler/precedence.py``)."""
        started = time.perf_counter()
        if not snapshot.clusters:
            # No cluster has reported capacity (none answered yet, or none is declared): each
            # job waits for one, with that reason. The ordering needs a resource space.
            return CycleResult(
                time=snapshot.time,
                pending={job.name: NO_CAPACITY_REASON for job in snapshot.queued},
                stats=CycleStats(seconds=time.perf_counter() - started),
            )
        scheduling_round = SchedulingRound(self.framework, self.strategy, snapshot, self.caches)
        usage = snapshot.usage
        ledger = self.usage if usage is None else None
        if ledger is not None:
            ledger.take_seed(snapshot)
        if ledger is not None:
            usage = ledger.observe(snapshot.time, scheduling_round.allocated)
        loop = _Loop(self, scheduling_round, snapshot, cancel, precedence, usage)
        loop.execute()
        if ledger is not None:
            ledger.hold(scheduling_round.allocated)
        stats = CycleStats(
            considered=loop.considered,
            scheduled=len(scheduling_round.scheduled),
            preempted=len(scheduling_round.evictions),
            cache_hits=loop.cache_hits,
            seconds=time.perf_counter() - started,
        )
        pending = loop.pending
        pending.update(scheduling_round.unscheduled)
        return CycleResult(
            time=snapshot.time,
            scheduled=tuple(scheduling_round.scheduled),
            preempted=tuple(scheduling_round.evictions),
            pending=pending,
            growing=loop.growing,
            stats=stats,
        )

    def observe_usage(self, snapshot: SchedulingSnapshot) -> SchedulingSnapshot:
        """``snapshot`` with the queues' decayed usage attached, the ledger advanced to its
        time here: for a round that runs in another process, whose ledger would be a copy.
        What that round places is charged from the next observation on."""
        if self.usage is None:
            return snapshot
        self.usage.take_seed(snapshot)
        usage = self.usage.observe(snapshot.time, queue_allocations(snapshot))
        return replace(snapshot, usage=usage)

    def seed_usage(self, at: float, by_queue: Mapping[str, Mapping[str, float]]) -> None:
        """Start the ledger from run history (``DecayedUsage.seed_named``): the service after
        a restart."""
        if self.usage is not None:
            self.usage.seed_named(at, by_queue)

    def adopt_usage(self, previous: SchedulingAlgorithm) -> None:
        """Keep ``previous``'s ledger when the settings change but the half-life does not
        (a fleet apply rebuilds the engine)."""
        if (
            self.usage is not None
            and previous.usage is not None
            and previous.usage.half_life == self.usage.half_life
        ):
            self.usage = previous.usage

    def jobs_by_queue(self, snapshot: SchedulingSnapshot) -> Mapping[str, Sequence[SchedulingJob]]:
        """Each queue's jobs in QueueSort order: as the caller keeps them if it does and they
        are in this profile's order, else grouped and sorted here."""
        given = snapshot.backlog.by_queue if snapshot.backlog is not None else None
        if given is not None and self.priority_order:
            names = [queue.name for queue in snapshot.queues]
            if len(given) == len(names) and all(name in given for name in names):
                return {name: given[name] for name in names}
        return sort_queues(snapshot.queued, snapshot.queues, self.sort_queue)


@dataclass(slots=True)
class _Unit:
    """What is placed at once: a job, or a gang of jobs combined into one. (Not frozen: one
    is made per decision, and a frozen dataclass's ``__init__`` costs several times more.)"""

    job: SchedulingJob
    members: tuple[SchedulingJob, ...]
    minimum: int | None = None
    pinned: str | None = None
    waiting: str | None = None

    @property
    def combined(self) -> bool:
        return len(self.members) > 1 or self.members[0] is not self.job


@dataclass(slots=True)
class _Attempt:
    decision: Decision
    kind: str | None = None
    deferrable: bool = False
    owner_limited: bool = False
    """Refused by its owner's limit alone: a strict-FIFO queue goes on past it."""


_JOB_GANG = attrgetter("job.gang")
"""A running job's gang, ``None`` for most."""


class _Loop:
    def __init__(
        self,
        algorithm: SchedulingAlgorithm,
        scheduling_round: SchedulingRound,
        snapshot: SchedulingSnapshot,
        cancel: threading.Event | None,
        precedence: Precedence | None,
        usage: Mapping[str, list[float]] | None = None,
    ) -> None:
        self.cancel = cancel
        self.precedence = precedence
        self.config = algorithm.config
        self.framework = algorithm.framework
        self.round = scheduling_round
        self.pending = PendingReasons()
        self.growing: dict[str, str] = {}
        """Running non-strict gangs with replicas left to place → why those wait."""
        # Within a round free resources only shrink unless something is evicted, so a shape
        # that did not fit will not fit later: identical jobs share one failed attempt.
        self.failed_shapes: dict[tuple[object, ...], str] = {}
        self.failed_preemptions: set[tuple[object, ...]] = set()
        # The PostFilter plugins that may act for each queue in this round (``may_act`` of a
        # ``PostFilterPrecheck``).
        self.post_filters: dict[str, list[PostFilterPlugin]] = {}
        self.deferred: list[tuple[SchedulingJob, tuple[SchedulingJob, ...]]] = []
        self.handled: set[str] = set()
        self.reserved_queues: set[str] = set()
        self.reservation_times: list[float] = []
        self.considered = 0
        self.cache_hits = 0
        self.queued = snapshot.queued
        self._gang_members: dict[str, list[SchedulingJob]] | None = None
        self.order: DrfOrder | FifoOrder
        if self.config.fair_share is FairShare.FIFO:
            owner_queues = frozenset(q.name for q in snapshot.queues if q.owners is not None)
            self.order = FifoOrder(snapshot.queued, owner_queues)
        else:
            jobs_by_queue = algorithm.jobs_by_queue(snapshot)
            self.order = DrfOrder(
                snapshot.queues,
                jobs_by_queue,
                scheduling_round.allocated,
                scheduling_round.total,
                usage,
                owner_allocations(snapshot, len(scheduling_round.total)),
            )

    @property
    def gang_members(self) -> dict[str, list[SchedulingJob]]:
        """Queued members of each named gang, in snapshot order; found on first need, so a
        backlog without named gangs is not walked for them."""
        members = self._gang_members
        if members is None:
            members = self._gang_members = {}
            for job in self.queued:
                if job.gang is not None and job.gang.name:
                    members.setdefault(job.gang.name, []).append(job)
        return members

    # --- the loop ---------------------------------------------------------------------------

    def execute(self) -> None:
        self._grow_partial_gangs()
        strict = self.config.queueing is Queueing.STRICT_FIFO
        owner_limit_stop = self.config.owner_limit_stop
        precedence = self.precedence
        for job in self.order:
            self.considered += 1
            if self.cancel is not None and self.considered % 64 == 0 and self.cancel.is_set():
                raise RoundCancelled
            if precedence is not None and precedence.pending:
                precedence.checkpoint()
            if job.name in self.handled:
                self.order.skipped(job)
                continue
            unit = self._unit(job)
            attempt = self._attempt(unit, leftover=False)
            if attempt.decision.assignment is not None:
                self._commit(unit, attempt.decision.assignment)
                self.order.skipped(job)
                continue
            if attempt.deferrable:
                self.deferred.append((job, unit.members))
                self._pend(unit, attempt.decision.reason)
                self.order.skipped(job)
                continue
            reason = attempt.decision.reason
            if unit.waiting is None:
                preempted = self._preempt(unit, attempt)
                if preempted is not None and preempted.decision.assignment is not None:
                    self._commit(unit, preempted.decision.assignment)
                    self.order.skipped(job)
                    continue
                if preempted is not None:
                    reason = preempted.decision.reason
            if unit.waiting is None:
                self.round.job_waits(unit.job, reason)
            if attempt.kind == Outcome.PLACEMENT:  # no room: did other owners come first?
                note = self.order.owner_note(job)
                if note is not None:
                    reason = f"{reason}; {note}"
            # The view this job was judged in, before a reservation of its own changes it.
            long = self._needs_long_view(job)
            shared_reason = reason
            if unit.waiting is None and attempt.kind == Outcome.PLACEMENT:
                reason = self._reserve(unit, reason)
            self._pend(unit, reason)
            if not strict and unit.job.gang is None and attempt.kind is not None:
                # Identical jobs right behind it would fail the same way: skip them at once,
                # so a backlog of identical unschedulable jobs costs one attempt, not one each.
                # They share the reason, not the head's reservation. Without reservations every
                # job is judged in the same view, so no per-job check is needed.
                same = (
                    partial(self._alike, model=job, long=long) if self.reservation_times else None
                )
                self.pending.set_slice(self.order.skip_alike(job, same), shared_reason)
                continue
            if strict and attempt.owner_limited and not owner_limit_stop:
                self.order.skipped(job)  # its owner's own limit: the others go on (Slurm)
            elif strict:
                for behind in self.order.blocked(job):
                    if behind.name not in self.handled:
                        self.pending.set(
                            behind.name,
                            f"waiting behind {job.name}, which heads its queue (strict-fifo)"
                            if self.config.fair_share is FairShare.DRF
                            else f"waiting behind {job.name}, the oldest job (strict-fifo)",
                        )
            else:
                self.order.skipped(job)
        self._leftover_pass()

    def _leftover_pass(self) -> None:
        """Jobs refused only by a soft limit get what nobody else wanted this round."""
        for job, members in self.deferred:
            if job.name in self.round.running:
                continue
            # The first pass marked the unit's members handled; a gang is rebuilt from its
            # members that are not, so open them again for this one retry.
            self.handled.difference_update(member.name for member in members)
            unit = self._unit(job)
            attempt = self._attempt(unit, leftover=True)
            if attempt.decision.assignment is not None:
                self._commit(unit, attempt.decision.assignment)
            elif attempt.kind == Outcome.PLACEMENT:
                self._pend(unit, attempt.decision.reason)
            self.handled.update(member.name for member in members)

    # --- units and attempts -------------------------------------------------------------------

    def _unit(self, job: SchedulingJob) -> _Unit:
        gang = job.gang
        if gang is None:
            return _Unit(job, (job,))
        non_strict = gang.mode is GangMode.NON_STRICT
        if not gang.name:
            wanted = gang.min_member if non_strict and gang.min_member else None
            minimum = wanted if wanted is not None and wanted < job.replica_count else None
            return _Unit(job, (job,), minimum=minimum)
        running = [
            r for r in self.round.running.values() if r.job.gang and r.job.gang.name == gang.name
        ]
        if running:
            # The gang has started: later members join it on its cluster as they fit.
            return _Unit(job, (job,), pinned=running[0].assignment.cluster)
        members = tuple(
            m for m in self.gang_members.get(gang.name, [job]) if m.name not in self.handled
        )
        replicas = sum(member.replica_count for member in members)
        need = gang.min_member or replicas
        combined = combine_gang(gang.name, list(members))
        if replicas < need:
            return _Unit(
                combined,
                members,
                waiting=f"gang {gang.name}: {replicas}/{need} members submitted",
            )
        minimum = need if non_strict and need < replicas else None
        return _Unit(combined, members, minimum=minimum)

    def _attempt(self, unit: _Unit, *, leftover: bool) -> _Attempt:
        if unit.waiting is not None:
            return _Attempt(Decision(None, unit.waiting), Outcome.ADMISSION)
        job = unit.job
        admitted = self.round.admit(job, leftover=leftover)
        if not admitted.ok:
            return _Attempt(
                Decision(None, admitted.reason or "not admitted"),
                Outcome.ADMISSION,
                admitted.deferrable,
                admitted.owner_limited,
            )
        long = self._needs_long_view(job)
        cacheable = not unit.combined and unit.pinned is None and unit.minimum is None
        key = (job.placement_key, long)
        if cacheable and key in self.failed_shapes:
            self.cache_hits += 1
            return _Attempt(Decision(None, self.failed_shapes[key]), Outcome.PLACEMENT)
        clusters = self.round.candidates(job, long=long, pinned=unit.pinned)
        if not clusters and unit.pinned is not None:
            reason = f"gang runs on cluster {unit.pinned}, which is not ready"
            return _Attempt(Decision(None, reason), Outcome.PLACEMENT)
        if not clusters:
            return _Attempt(Decision(None, no_cluster_reason(job)), Outcome.PLACEMENT)
        decision = self.round.select(job, clusters, minimum=unit.minimum)
        if decision.assignment is None:
            if cacheable:
                self.failed_shapes[key] = decision.reason
            return _Attempt(decision, Outcome.PLACEMENT)
        committed = self.round.permit_and_place(job, decision, clusters, unit.minimum)
        if committed.assignment is None:
            return _Attempt(committed, Outcome.ADMISSION)
        return _Attempt(committed)

    def _alike(self, other: SchedulingJob, *, model: SchedulingJob, long: bool) -> bool:
        return alike(other, model) and self._needs_long_view(other) == long

    def _needs_long_view(self, job: SchedulingJob) -> bool:
        if not self.reservation_times:
            return False
        if job.expected_runtime is None:
            return True
        return self.round.now + job.expected_runtime > min(self.reservation_times) + 1e-9

    # --- outcomes -------------------------------------------------------------------------

    def _commit(self, unit: _Unit, assignment: Assignment) -> None:
        if not unit.combined:
            delta = self.round.commit(unit.job, assignment)
            self.order.adjust(unit.job.queue, delta, owner_of(unit.job))
            self.handled.add(unit.job.name)
            return
        by_member: dict[str, list[Placement]] = {}
        for placement in assignment.placements:
            owner, task = placement.task.split(GANG_TASK_SEPARATOR, 1)
            by_member.setdefault(owner, []).append(replace(placement, task=task))
        for member in unit.members:
            self.handled.add(member.name)
            placements = by_member.get(member.name)
            if not placements:
                self.pending.set(
                    member.name, f"gang {unit.job.name} started without it; it joins when it fits"
                )
                self.handled.discard(member.name)
                continue
            part = Assignment(assignment.cluster, tuple(placements), assignment.annotations)
            self.order.adjust(member.queue, self.round.commit(member, part), owner_of(member))

    def _pend(self, unit: _Unit, reason: str) -> None:
        for member in unit.members:
            self.pending.set(member.name, reason)
            self.handled.add(member.name)

    def _post_filters(self, queue: str) -> list[PostFilterPlugin]:
        """The PostFilter plugins that may act for ``queue`` this round, asked once per queue
        (then read from ``self.post_filters``); skipping the others changes nothing, as they
        would return an empty result."""
        plugins = self.post_filters[queue] = [
            plugin
            for plugin, precheck in self.framework.post_filter_prechecks
            if precheck is None or precheck.may_act(queue, self.round)
        ]
        return plugins

    def _preempt(self, unit: _Unit, attempt: _Attempt) -> _Attempt | None:
        job = unit.job
        plugins = self.post_filters.get(job.queue)
        if plugins is None:
            plugins = self._post_filters(job.queue)
        if not plugins:
            return None
        key = (job.placement_key, job.queue, job.priority)
        if key in self.failed_preemptions:
            return None
        refusals = []
        for plugin in plugins:
            result = plugin.post_filter(
                PostFilterInput(
                    job=job,
                    reason=attempt.decision.reason,
                    cycle=self.round.cycle,
                    context=self.round,
                )
            )
            if result.victims:
                why = result.reason or f"preempted for {job.name} ({plugin.name})"
                for queue, amount in self.round.evict(result.victims, by=job.name, reason=why):
                    self.order.adjust(queue, -amount)
                self.failed_shapes.clear()
                self.failed_preemptions.clear()
                return self._attempt(unit, leftover=True)
            if result.reason:
                refusals.append(result.reason)
        self.failed_preemptions.add(key)
        if refusals:
            return _Attempt(Decision(None, f"{attempt.decision.reason}; {'; '.join(refusals)}"))
        return None

    def _reserve(self, unit: _Unit, reason: str) -> str:
        """EASY backfill: the first blocked job of each queue reserves its earliest start."""
        if self.config.queueing is not Queueing.BACKFILL or unit.job.queue in self.reserved_queues:
            return reason
        self.reserved_queues.add(unit.job.queue)
        reservation = find_reservation(self.round, unit.job, unit.pinned, unit.minimum)
        if reservation is None:
            return f"{reason}; no reservation possible: not enough running jobs with a known end"
        at, assignment = reservation
        view = self.round.open_long_view()
        cluster = next(c for c in view if c.name == assignment.cluster)
        for placement in assignment.placements:
            cluster.nodes.allocate(placement.row, placement.request, placement.gpus)
        self.reservation_times.append(at)
        self.failed_shapes.clear()
        return f"reserved at t={at:g} on {assignment.cluster} (backfill): {reason}"

    def _grows(self, name: str) -> bool:
        """Whether the backend of cluster ``name`` can add replicas to a running run."""
        return next((c.grows for c in self.round.clusters if c.name == name), False)

    def _grow_partial_gangs(self) -> None:
        """Non-strict gangs that started with fewer members add the rest as they fit."""
        running_jobs = list(self.round.running.values())
        # Every cycle: most fleets run no gang at all, which a C-level count tells at once.
        if list(map(_JOB_GANG, running_jobs)).count(None) == len(running_jobs):
            return
        for running in running_jobs:
            job = running.job
            if job.gang is None or job.gang.mode is not GangMode.NON_STRICT:
                continue  # only a non-strict gang can run with members missing
            if len(running.assignment.placements) >= job.replica_count:
                continue
            placed: dict[str, int] = {}
            for placement in running.assignment.placements:
                placed[placement.task] = placed.get(placement.task, 0) + 1
            rest = remaining_replicas(job, placed)
            if rest is None:
                continue
            wanted = job.replica_count
            placed_count = len(running.assignment.placements)
            if not self._grows(running.assignment.cluster):
                why = (
                    f"cluster {running.assignment.cluster}'s backend cannot add replicas to a "
                    "running run"
                )
                self.growing[job.name] = gangs.members_wait_reason(placed_count, wanted, why)
                continue
            admission = self.round.admit(rest, leftover=False)
            admitted, refused = admission.ok, admission.reason
            if not admitted:
                why = refused or "not admitted"
                self.growing[job.name] = gangs.members_wait_reason(placed_count, wanted, why)
                continue
            clusters = self.round.candidates(rest, long=False, pinned=running.assignment.cluster)
            decision = self.round.select(rest, clusters, minimum=1)
            if decision.assignment is None:
                why = decision.reason or f"no room on cluster {running.assignment.cluster}"
                self.growing[job.name] = gangs.members_wait_reason(placed_count, wanted, why)
                continue
            committed = self.round.permit_and_place(rest, decision, clusters, 1)
            if committed.assignment is None:
                why = committed.reason or "not permitted"
                self.growing[job.name] = gangs.members_wait_reason(placed_count, wanted, why)
                continue
            renumbered = tuple(
                replace(p, replica=p.replica + placed.get(p.task, 0))
                for p in committed.assignment.placements
            )
            grown = Assignment(committed.assignment.cluster, renumbered)
            now_placed = placed_count + len(renumbered)
            if now_placed < wanted:
                why = f"no room for them on cluster {grown.cluster} yet"
                self.growing[job.name] = gangs.members_wait_reason(now_placed, wanted, why)
            self.order.adjust(job.queue, self.round.commit(job, grown), owner_of(job))
