"""The job lifecycle core: the job-state vocabulary, the transition table, and the rules
around a job's runs (dependencies, retries, arrays, gangs) with their reasons' wording.

Pure and clock-free: ``step(job, event)`` (``machine.py``) takes what the core needs of a job
(``JobView``, ``view.py``) and one event (``events.py``) and answers with the effects that
follow (``effects.py``); the service applies them to the store and the backends, the
simulator to virtual time. Neither keeps a second copy of a rule written here.
"""

from typing import TYPE_CHECKING

from flotilla.lazy import exports

if TYPE_CHECKING:
    from flotilla.lifecycle.machine import step
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
    from flotilla.lifecycle.view import DependencyView, JobView

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
    "DependencyView",
    "JobState",
    "JobView",
    "RunState",
    "is_allowed",
    "step",
]

__getattr__ = exports(
    __name__,
    {
        "flotilla.lifecycle.machine": ["step"],
        "flotilla.lifecycle.states": [
            name for name in __all__ if name not in {"step", "DependencyView", "JobView"}
        ],
        "flotilla.lifecycle.view": ["DependencyView", "JobView"],
    },
)
