"""The job lifecycle core: the job-state vocabulary, the transition table, and the rules
around a job's runs (dependencies, retries, arrays, gangs) with their reasons' wording.

Pure and clock-free: it reads specs (``flotilla.model``) and states, and answers what happens
next; the service applies its answers to the store and the backends, the simulator to virtual
time. Neither keeps a second copy of a rule written here.
"""

from flotilla.lifecycle.states import (
    ACTIVE_JOB_STATES,
    ACTIVE_RUN_STATES,
    JOB_STATE_ORDER,
    JOB_TRANSITIONS,
    RUN_STATE_FOR_JOB,
    TERMINAL_JOB_STATES,
    TERMINAL_STATE_NAMES,
    WAITING_JOB_STATES,
    WAITING_STATE_NAMES,
    JobState,
    RunState,
    is_allowed,
)

__all__ = [
    "ACTIVE_JOB_STATES",
    "ACTIVE_RUN_STATES",
    "JOB_STATE_ORDER",
    "JOB_TRANSITIONS",
    "RUN_STATE_FOR_JOB",
    "TERMINAL_JOB_STATES",
    "TERMINAL_STATE_NAMES",
    "WAITING_JOB_STATES",
    "WAITING_STATE_NAMES",
    "JobState",
    "RunState",
    "is_allowed",
]
