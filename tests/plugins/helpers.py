"""Inputs of extension points, built from scenario data."""

from __future__ import annotations

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import (
    CycleState,
    FilterInput,
    ReserveInput,
    ScoreInput,
)
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.nodes import Mask


def filter_input(job: SchedulingJob, cluster: Cluster, task: int = 0) -> FilterInput:
    return FilterInput(job=job, task=job.tasks[task], cluster=cluster, cycle=CycleState(time=0))


def score_input(
    job: SchedulingJob, cluster: Cluster, candidates: list[int] | None = None
) -> ScoreInput:
    rows = np.arange(len(cluster.nodes)) if candidates is None else np.array(candidates)
    return ScoreInput(
        job=job,
        task=job.tasks[0],
        cluster=cluster,
        candidates=rows.astype(np.intp),
        cycle=CycleState(time=0),
    )


def reserve_input(job: SchedulingJob, cluster: Cluster, row: int) -> ReserveInput:
    return ReserveInput(job=job, task=job.tasks[0], replica=0, cluster=cluster, row=row)


def rows(mask: Mask) -> list[int]:
    return [int(row) for row in np.flatnonzero(mask)]
