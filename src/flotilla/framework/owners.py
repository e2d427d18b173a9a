"""Who owns a job, for fairness and limits among the owners of one queue."""

from __future__ import annotations

from flotilla.framework.jobs import SchedulingJob

NO_OWNER = ""
"""The owner of a job with no ``user`` (nor a submitter): one owner like any other."""


def owner_of(job: SchedulingJob) -> str:
    """The job's ``user``, else who submitted it (``build_job``), else ``NO_OWNER``."""
    return job.user if job.user is not None else NO_OWNER


def owner_label(owner: str) -> str:
    """An owner as a reason names it."""
    return owner if owner else "(no user)"
