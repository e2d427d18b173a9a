"""The job lifecycle core: the job-state vocabulary, the transition table, and the rules
around a job's runs (dependencies, retries, arrays, gangs) with their reasons' wording.

Pure and clock-free: ``step(job, event)`` (``machine.py``) takes what the core needs of a job
(``JobView``, ``view.py``) and one event (``events.py``) and answers with the effects that
follow (``effects.py``); the service applies them to the store and the backends, the
simulator to virtual time. Neither keeps a second copy of a rule written here.

The names below are imported on first use (PEP 562): a client that needs the state names
(``states.py``) does not build the specs' models that the rules read (docs/performance.md).
"""

from typing import TYPE_CHECKING

from flotilla.model.exports import lazy_exports

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

_MODULES: dict[str, list[str]] = {
    "flotilla.lifecycle.machine": ["step"],
    "flotilla.lifecycle.states": [
        name for name in __all__ if name not in {"step", "DependencyView", "JobView"}
    ],
    "flotilla.lifecycle.view": ["DependencyView", "JobView"],
}
"""Where each exported name is defined."""
__getattr__ = lazy_exports(__name__, _MODULES)
