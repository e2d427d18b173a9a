"""The job and run states the store enforces: the lifecycle core's (``flotilla.lifecycle``).

Kept as a module of the store so that ``flotilla.store.states`` still names them; the
vocabulary and the transition table live in ``flotilla/lifecycle/states.py`` alone.
"""

from flotilla.lifecycle.states import (
    ACTIVE_JOB_STATES,
    ACTIVE_RUN_STATES,
    JOB_TRANSITIONS,
    RUN_STATE_FOR_JOB,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobState,
    RunState,
    is_allowed,
)

__all__ = [
    "ACTIVE_JOB_STATES",
    "ACTIVE_RUN_STATES",
    "JOB_TRANSITIONS",
    "RUN_STATE_FOR_JOB",
    "TERMINAL_JOB_STATES",
    "WAITING_JOB_STATES",
    "JobState",
    "RunState",
    "is_allowed",
]
