"""Errors the store raises. Every one means the transaction was rolled back: nothing was written."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every store error."""


class NotFoundError(StoreError, LookupError):
    """A job, run, queue, quota, cluster or node that does not exist."""


def job_not_found(reference: str) -> NotFoundError:
    """What a reference that names no job is told; the API tells a caller the same of a job
    it may not read, so that the answer does not reveal that the job exists."""
    if not reference:
        return NotFoundError("no such job: an empty reference")
    queue, slash, name = reference.partition("/")
    if slash:
        return NotFoundError(f"no job named {name!r} in queue {queue!r}")
    return NotFoundError(f"no such job: {reference!r} is no job's id, id prefix or name")


class AmbiguousJobError(StoreError, LookupError):
    """A job reference (a name, an id prefix) that fits several jobs; ``candidates``
    describes each as ``QUEUE/NAME (ID)``."""

    def __init__(self, reference: str, candidates: list[str]) -> None:
        self.reference = reference
        self.candidates = candidates
        super().__init__(
            f"{reference!r} names {len(candidates)} jobs or more: give a longer id prefix, "
            "a full id or QUEUE/NAME"
        )


class InvalidJobError(StoreError, ValueError):
    """A job of a submitted batch cannot be stored (for example its queue does not exist)."""

    problems: list[str] = []
    """One ``path: problem`` line per bad field, when the error is about fields."""


class InvalidDependencyError(InvalidJobError):
    """A ``depends_on`` entry names no job, or the batch's dependencies form a cycle."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid dependencies; nothing was submitted")


class DuplicateJobError(InvalidJobError):
    """A job name used twice in one batch of one queue (a name of the batch must mean one
    job to the batch's dependencies; a stored job's name may be used again)."""

    def __init__(self, queue: str, names: list[str]) -> None:
        self.queue = queue
        self.names = names
        shown = ", ".join(repr(name) for name in names[:5])
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        super().__init__(
            f"queue {queue!r}: job name(s) {shown}{more} given twice in one submission"
        )


class IllegalTransitionError(StoreError):
    """A state change the job state machine does not allow."""

    def __init__(self, job_id: str, old: str, new: str) -> None:
        self.job_id = job_id
        self.old = old
        self.new = new
        super().__init__(f"job {job_id}: cannot move from {old} to {new}")


class StaleRunError(StoreError):
    """A report about a run that is no longer the job's active run (a late message)."""


class ConflictError(StoreError):
    """The change would break a reference (for example deleting a queue that has jobs)."""

    problems: list[str] = []
    """One line per problem when there are several (a fleet apply)."""


class LeaseLostError(StoreError):
    """A fenced write by a replica that no longer holds the leader lease."""
