"""Scenario features the engine does not implement yet: refused loudly, never ignored.

A scenario that asks for a policy the engine cannot honour would otherwise produce a report
that looks right and is not. Each entry names the field path and what is missing.
"""

from __future__ import annotations

from flotilla.model.job import GangMode
from flotilla.model.queue import BorrowPolicy, ReclaimWithinCohort, WithinQueue
from flotilla.model.scenario import Queueing, Scenario


def unsupported_features(scenario: Scenario) -> list[str]:
    problems = []
    settings = scenario.settings
    if settings.queueing is Queueing.BACKFILL:
        problems.append("settings.queueing: backfill is not implemented yet")
    if settings.fair_share_preemption:
        problems.append("settings.fair_share_preemption: preemption is not implemented yet")
    if settings.priority_preemption:
        problems.append("settings.priority_preemption: preemption is not implemented yet")
    if scenario.quotas:
        problems.append("quotas: the elastic quota tree is not enforced yet")
    for index, queue in enumerate(scenario.queues):
        policy = queue.preemption
        if (
            policy.within_queue is not WithinQueue.NEVER
            or policy.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
            or policy.borrow_within_cohort.policy is not BorrowPolicy.NEVER
        ):
            problems.append(f"queues[{index}].preemption: preemption is not implemented yet")
    for index, job in enumerate(scenario.jobs):
        gang = job.gang
        if gang is not None:
            replicas = sum(task.replicas for task in job.tasks)
            if gang.name is not None:
                problems.append(
                    f"jobs[{index}].gang.name: gangs across jobs are not implemented yet"
                )
            elif gang.mode is GangMode.NON_STRICT and (gang.min_member or replicas) < replicas:
                problems.append(
                    f"jobs[{index}].gang.mode: non-strict gangs are not implemented yet"
                )
        for task_index, task in enumerate(job.tasks):
            if task.topology is not None and task.topology.gpu is not None:
                problems.append(
                    f"jobs[{index}].tasks[{task_index}].topology: GPU topology scopes are not "
                    "implemented yet"
                )
    return problems
