"""Build the engine's clusters and jobs from a scenario's specs."""

from __future__ import annotations

from dataclasses import replace

from flotilla.framework.fleet import resource_space_for
from flotilla.framework.jobs import SchedulingJob, ShapeInterner, build_job
from flotilla.framework.resources import ResourceSpace
from flotilla.model.job import JobSpec
from flotilla.model.loader import walk_quotas
from flotilla.model.scenario import Scenario


def resource_space(scenario: Scenario) -> ResourceSpace:
    """Every resource the scenario's nodes, jobs and quotas name."""
    quota_names = [
        name
        for _, quota, _ in walk_quotas(scenario.quotas)
        for name in (*quota.min, *(quota.max or {}))
    ]
    return resource_space_for(scenario.clusters, scenario.jobs, quota_names)


def build_jobs(
    scenario: Scenario, space: ResourceSpace, shapes: ShapeInterner | None = None
) -> list[tuple[JobSpec, SchedulingJob]]:
    """Expand ``count`` and resolve priority classes; sequence is file order. Jobs built
    alike share their shapes through ``shapes`` (the engine's interner) when given."""
    classes = {pc.name: pc for pc in scenario.priority_classes}
    # A named gang without min_member waits for every member the scenario declares.
    gang_sizes: dict[str, int] = {}
    for spec in scenario.jobs:
        if spec.gang is not None and spec.gang.name:
            replicas = sum(task.replicas for task in spec.tasks) * len(spec.job_names())
            gang_sizes[spec.gang.name] = gang_sizes.get(spec.gang.name, 0) + replicas
    jobs: list[tuple[JobSpec, SchedulingJob]] = []
    for spec in scenario.jobs:
        priority_class = classes.get(spec.priority_class) if spec.priority_class else None
        priority = spec.priority if spec.priority is not None else 0
        preemptible = True
        if priority_class is not None:
            priority = priority_class.value
            preemptible = priority_class.preemptible
        if spec.preemptible is not None:
            preemptible = spec.preemptible
        # Jobs expanded from one spec share its tasks, vectors and placement key.
        first = build_job(
            spec,
            name=spec.job_names()[0],
            space=space,
            sequence=len(jobs),
            submit_time=spec.submit_at,
            priority=priority,
            preemptible=preemptible,
            shapes=shapes,
        )
        gang = spec.gang
        if gang is not None and gang.name and gang.min_member is None:
            full = gang.model_copy(update={"min_member": gang_sizes[gang.name]})
            first = replace(first, gang=full)
        for name in spec.job_names():
            same = name == first.name and len(jobs) == first.sequence
            # A spec without ``count`` is one job: ``first`` itself, not a copy of it.
            jobs.append((spec, first if same else replace(first, name=name, sequence=len(jobs))))
    return jobs
