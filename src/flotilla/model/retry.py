"""Retries and job arrays: the ``retry`` and ``array`` parts of a job spec."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from flotilla.model.base import MAX_COUNT, MAX_SECONDS, Strict
from flotilla.model.durations import Duration


class Backoff(StrEnum):
    EXPONENTIAL = "exponential"
    FIXED = "fixed"
    NONE = "none"


class RetryCause(StrEnum):
    """Why an attempt ended without success (``docs/jobs.md`` says what each backend reports).

    ``failed``: the command exited non-zero, was killed by a signal Flotilla did not send (a
    segfault, the OOM killer, ``kill -9``), could not start or exceeded ``max_runtime``;
    ``node_failure``: its cluster stopped answering;
    ``lost``: the backend lost track of the run (no record of it any more)."""

    FAILED = "failed"
    LOST = "lost"
    NODE_FAILURE = "node_failure"


class RetrySpec(Strict):
    """Run the job again when an attempt ends for a cause in ``on``, at most ``limit`` more
    times (Kubernetes' ``backoffLimit``, Ray's ``max_retries``). Attempt ``n + 1`` starts no
    sooner than ``delay`` (fixed), ``delay * 2**(n-1)`` (exponential, at most ``max_delay``) or
    at once (none) after attempt ``n`` ended."""

    limit: int = Field(ge=0, le=1000)
    backoff: Backoff = Backoff.EXPONENTIAL
    delay: Duration = 10.0
    max_delay: Duration = 3600.0
    on: list[RetryCause] = Field(
        default=[RetryCause.FAILED, RetryCause.LOST, RetryCause.NODE_FAILURE], min_length=1
    )

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, data: Any) -> Any:
        """YAML 1.1 reads an unquoted ``on:`` key as the boolean true (and JSON then writes
        it as ``"true"``): take either as ``on``, so ``on: [failed]`` works as written."""
        if isinstance(data, dict):
            for key in (True, "true"):
                if key in data and "on" not in data:
                    data = {("on" if k == key else k): v for k, v in data.items()}
        return data

    def delay_after(self, attempt: int) -> float:
        """Seconds to wait after attempt ``attempt`` (1 for the first) before the next: at
        most ``MAX_SECONDS`` even for a spec stored before delays were bounded, so that the
        moment computed from it is one a date can hold."""
        if self.backoff is Backoff.NONE:
            return 0.0
        if self.backoff is Backoff.FIXED:
            return min(self.delay, MAX_SECONDS)
        return min(self.max_delay, self.delay * 2.0 ** min(attempt - 1, 64), MAX_SECONDS)


class ArraySpec(Strict):
    """``size`` jobs from one spec (Slurm's ``--array=0-(size-1)%parallelism``): elements
    ``NAME-0`` … ``NAME-(size-1)`` share an array id; each sees ``FLOTILLA_ARRAY_INDEX``,
    ``FLOTILLA_ARRAY_SIZE`` and ``FLOTILLA_ARRAY_ID``. ``parallelism``: at most this many
    elements leased, pending or running at once (no limit when omitted)."""

    size: int = Field(ge=1)
    parallelism: int | None = Field(default=None, ge=1, le=MAX_COUNT)
