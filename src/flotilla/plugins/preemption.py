"""Preemption policies as PostFilter plugins: Kueue's per-queue rules, Armada's urgency and
fair-share preemption. Each finds a minimal victim set (``flotilla.framework.preemption``).

Victim order, everywhere: least important first — lower priority, then the least work lost
(GPU-seconds since the last checkpoint), then the most recently started; Kueue's rules put
borrowers of other queues first. A job within its ``min_runtime`` is never a victim.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flotilla.framework.interfaces import PostFilterInput, PostFilterResult, PreemptionContext
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.preemption import Unit, candidate_units, lost_work, minimal_victims
from flotilla.framework.resources import EPSILON
from flotilla.model.queue import BorrowPolicy, ReclaimWithinCohort, WithinQueue


def _least_important(running: Any, now: float) -> tuple[Any, ...]:
    """Lower priority first; then the least work lost (GPU-seconds since the last checkpoint,
    ``lost_work``); then the most recently started."""
    return (
        running.job.priority,
        lost_work(running, now),
        -running.started_at,
        -running.job.sequence,
    )


class QueuePreemption:
    """Kueue semantics, per the preemptor's queue policy.

    * ``within_queue: lower_priority`` — jobs of the same queue with lower priority.
    * ``reclaim_within_cohort`` — when the preemptor stays within its quota guarantee, jobs of
      other queues in the cohort whose quota is borrowing (``any``, or ``lower_priority``).
    * ``borrow_within_cohort: lower_priority`` — when the preemptor must borrow, borrowers of
      lower priority, at most ``max_priority_threshold``.
    Borrowers of other queues go first; a victim queue stops being a candidate once its
    victims cover what it borrowed.
    """

    name = "queue-preemption"

    def may_act(self, queue: str, context: PreemptionContext) -> bool:
        """False when ``post_filter`` returns an empty result for every job of ``queue`` in
        this round: the queue's policy allows no preemption. The engine asks once per queue and
        round (policy and quota tree do not change within a round) and then skips the call."""
        return any(self._allowed(queue, context))

    @staticmethod
    def _allowed(queue: str, context: PreemptionContext) -> tuple[bool, bool]:
        """(within the queue, across the cohort) preemption allowed by ``queue``'s policy."""
        policy = context.queue_policy(queue)
        within = policy.within_queue is WithinQueue.LOWER_PRIORITY
        across = (
            policy.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
            or policy.borrow_within_cohort.policy is not BorrowPolicy.NEVER
        ) and context.quota_node(queue) is not None
        return within, across

    def post_filter(self, request: PostFilterInput) -> PostFilterResult:
        context = request.context
        if context is None:
            return PostFilterResult()
        job = request.job
        policy = context.queue_policy(job.queue)
        borrow = policy.borrow_within_cohort
        within, across = self._allowed(job.queue, context)
        if not within and not across:
            return PostFilterResult()  # this queue's policy allows no preemption
        reclaim = context.within_guarantee(job)
        total_of = {r.job.name: r.assignment.held(len(job.total)) for r in context.running_jobs}
        own_victims = [
            r.job
            for r in context.running_jobs
            if within
            and r.job.queue == job.queue
            and r.job.preemptible
            and r.job.priority < job.priority
        ]
        # Kueue's preemption across the whole cohort: the job may reclaim from borrowers when
        # it is within its guarantee once lower-priority jobs of its own queue are gone too;
        # every victim set that reaches into other queues must then free that much of its own.
        needs_own = not reclaim and across and bool(own_victims)
        if needs_own:
            freed = sum((total_of[v.name] for v in own_victims), start=np.zeros_like(job.total))
            reclaim = context.within_guarantee(job, freed)
            needs_own = reclaim
        eligible: list[tuple[tuple[Any, ...], SchedulingJob]] = []
        cohort_borrowers: set[str] = set()
        borrowing: dict[str, bool] = {}
        for running in context.running_jobs:
            victim = running.job
            if not victim.preemptible:
                continue
            if victim.queue == job.queue:
                if within and victim.priority < job.priority:
                    eligible.append(((1, *_least_important(running, context.now)), victim))
                continue
            if not across:
                continue
            if victim.queue not in borrowing:
                borrowed = context.borrowed(victim.queue)
                borrowing[victim.queue] = (
                    context.same_cohort(job.queue, victim.queue)
                    and borrowed is not None
                    and bool(np.any(borrowed > EPSILON))
                )
            if not borrowing[victim.queue]:
                continue
            if reclaim:
                allowed = policy.reclaim_within_cohort is ReclaimWithinCohort.ANY or (
                    policy.reclaim_within_cohort is ReclaimWithinCohort.LOWER_PRIORITY
                    and victim.priority < job.priority
                )
            else:
                threshold = borrow.max_priority_threshold
                allowed = (
                    borrow.policy is BorrowPolicy.LOWER_PRIORITY
                    and victim.priority < job.priority
                    and (threshold is None or victim.priority <= threshold)
                )
            if allowed:
                cohort_borrowers.add(victim.queue)
                eligible.append(((0, *_least_important(running, context.now)), victim))
        if not eligible:
            return PostFilterResult()
        eligible.sort(key=lambda item: item[0])
        units = candidate_units(context, [victim for _, victim in eligible])
        queue_of = {victim.name: victim.queue for _, victim in eligible}
        remaining = {queue: context.borrowed(queue) for queue in cohort_borrowers}

        def admissible(chosen: list[Unit], unit: Unit) -> bool:
            queue = queue_of[unit[0]]
            if queue == job.queue:
                return True
            left = remaining[queue]
            if left is None or not np.any(left > EPSILON):
                return False
            taken = sum(
                (
                    total_of[name]
                    for other in chosen
                    for name in other
                    if queue_of.get(name) == queue
                ),
                start=np.zeros_like(job.total),
            )
            return bool(np.any(left - taken > EPSILON))

        def within_after(victims: list[str]) -> bool:
            """A set that reclaims from other queues leaves the job within its guarantee."""
            if all(queue_of[name] == job.queue for name in victims):
                return True
            freed = sum(
                (total_of[name] for name in victims if queue_of[name] == job.queue),
                start=np.zeros_like(job.total),
            )
            return context.within_guarantee(job, freed)

        victims = minimal_victims(
            context,
            job,
            [unit for _, unit in units],
            admissible,
            within_after if needs_own else None,
        )
        if victims is None:
            lenders = sorted(cohort_borrowers)
            if reclaim and lenders:
                return PostFilterResult(reason=f"waiting for reclaim from {', '.join(lenders)}")
            return PostFilterResult()
        kind = (
            "reclaim" if reclaim and any(queue_of[v] != job.queue for v in victims) else "priority"
        )
        return PostFilterResult(
            victims=victims, reason=f"preempted by {job.name} ({job.queue}, {kind} within cohort)"
        )


class PriorityPreemption:
    """Armada's urgency preemption: a job may preempt preemptible jobs of lower priority in
    any queue (Kubernetes pod priority). Enabled by ``settings.priority_preemption``."""

    name = "priority-preemption"

    def post_filter(self, request: PostFilterInput) -> PostFilterResult:
        context = request.context
        if context is None:
            return PostFilterResult()
        job = request.job
        lower = [
            r.job
            for r in sorted(
                (r for r in context.running_jobs if r.job.priority < job.priority),
                key=lambda r: _least_important(r, context.now),
            )
        ]
        units = candidate_units(context, lower)
        victims = minimal_victims(context, job, [unit for _, unit in units])
        if victims is None:
            return PostFilterResult()
        return PostFilterResult(
            victims=victims, reason=f"preempted by {job.name} (priority {job.priority})"
        )


class FairSharePreemption:
    """Armada's fair-share preemption: queues above their fair share lose preemptible jobs to
    a queue below it. A victim is taken only while its queue's weighted dominant share, after
    losing it, stays at least the preemptor queue's share after gaining the job — so every
    eviction moves the two queues toward each other and nothing ping-pongs.
    Enabled by ``settings.fair_share_preemption``."""

    name = "fair-share-preemption"

    def post_filter(self, request: PostFilterInput) -> PostFilterResult:
        context = request.context
        if context is None:
            return PostFilterResult()
        job = request.job
        mine = context.queue_share(job.queue, job.total)
        others = [r for r in context.running_jobs if r.job.queue != job.queue]
        now = context.now
        others.sort(key=lambda r: (-context.queue_share(r.job.queue), *_least_important(r, now)))
        units = candidate_units(context, [r.job for r in others])
        queue_of = {r.job.name: r.job.queue for r in others}
        total_of = {r.job.name: r.assignment.held(len(job.total)) for r in others}

        def admissible(chosen: list[Unit], unit: Unit) -> bool:
            queue = queue_of[unit[0]]
            losing = sum(
                (
                    total_of[name]
                    for part in [*chosen, unit]
                    for name in part
                    if queue_of[name] == queue
                ),
                start=np.zeros_like(job.total),
            )
            return context.queue_share(queue, -losing) >= mine - EPSILON

        victims = minimal_victims(context, job, [unit for _, unit in units], admissible)
        if victims is None:
            return PostFilterResult()
        return PostFilterResult(
            victims=victims, reason=f"preempted by {job.name} to restore fair share ({job.queue})"
        )
