"""Dependency rules: which ends of a job meet a ``depends_on`` condition, and the words for it.

One table, read by the service (``service/dependencies.py``, the API's ``why``) and the
simulator (``sim/dependencies.py``). Conditions follow Slurm's ``--dependency`` (and Airflow's
trigger rules):

=========================  ===========================  ==================
condition                  met when the dependency      Slurm
=========================  ===========================  ==================
``succeeded`` (default)    succeeded                    ``afterok``
``finished``               ended in any way             ``afterany``
``failed``                 ended in any way but success ``afternotok``
``finished_not_cancelled`` succeeded or failed          (none)
``failed_not_cancelled``   failed                       (none)
=========================  ===========================  ==================

A job "ended" when it reached a terminal state (``TERMINAL_JOB_STATES``): succeeded, failed or
cancelled. A preempted job is re-queued and keeps its dependents waiting; a job that fails for
good after its retries ends ``failed``. Once a dependency has ended in a state its condition
does not accept, the condition can never be met and the waiting job ends ``skipped``
(``UNMET_END``): the branch not taken, an end that is not a failure. A skipped job has ended,
so ``finished`` accepts it, and ``failed`` (it did not succeed) too.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from flotilla.lifecycle.states import TERMINAL_STATE_NAMES, JobState
from flotilla.model.job import DependencyCondition

UNMET_END = JobState.SKIPPED
"""Where a job goes whose dependency can never be met."""

ACCEPTED_ENDS: dict[DependencyCondition, frozenset[str]] = {
    DependencyCondition.SUCCEEDED: frozenset({JobState.SUCCEEDED.value}),
    DependencyCondition.FINISHED: TERMINAL_STATE_NAMES,
    DependencyCondition.FAILED: TERMINAL_STATE_NAMES - {JobState.SUCCEEDED.value},
    DependencyCondition.FINISHED_NOT_CANCELLED: frozenset(
        {JobState.SUCCEEDED.value, JobState.FAILED.value}
    ),
    DependencyCondition.FAILED_NOT_CANCELLED: frozenset({JobState.FAILED.value}),
}
"""Each condition → the terminal states of a dependency that meet it."""

SLURM_EQUIVALENT: dict[DependencyCondition, str | None] = {
    DependencyCondition.SUCCEEDED: "afterok",
    DependencyCondition.FINISHED: "afterany",
    DependencyCondition.FAILED: "afternotok",
    DependencyCondition.FINISHED_NOT_CANCELLED: None,
    DependencyCondition.FAILED_NOT_CANCELLED: None,
}

_VERBS: dict[DependencyCondition, str] = {
    DependencyCondition.SUCCEEDED: "succeed",
    DependencyCondition.FINISHED: "finish",
    DependencyCondition.FAILED: "fail or be cancelled",
    DependencyCondition.FINISHED_NOT_CANCELLED: "succeed or fail",
    DependencyCondition.FAILED_NOT_CANCELLED: "fail",
}


class Verdict(Enum):
    MET = "met"
    WAITING = "waiting"
    NEVER = "never"


def accepts(condition: DependencyCondition, state: str) -> bool:
    """Whether a dependency in ``state`` (a state name) meets ``condition``."""
    return state in ACCEPTED_ENDS[condition]


def verdict(condition: DependencyCondition, state: str | None) -> Verdict:
    """Where a waiter stands against one dependency in ``state`` (None: not seen yet)."""
    if state is not None and accepts(condition, state):
        return Verdict.MET
    if state in TERMINAL_STATE_NAMES:
        return Verdict.NEVER
    return Verdict.WAITING


def waits_for(label: str, condition: DependencyCondition, status: str | None = None) -> str:
    """One part of a waiting reason: ``job prep to succeed (it is running)``."""
    part = f"{label} to {_VERBS[condition]}"
    return f"{part} ({status})" if status else part


def waiting_reason(parts: Iterable[str]) -> str:
    return "waits for " + "; ".join(parts)


def never_reason(label: str, condition: DependencyCondition, state: str) -> str:
    """Why a job is skipped when its dependency ``label`` ended in ``state``, which its
    ``condition`` does not accept."""
    return f"dependency {label} ended {state}; this job needed it {condition.value}"
