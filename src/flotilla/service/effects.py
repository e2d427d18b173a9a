"""How the service applies each of the lifecycle core's effects (issue 36): one exhaustive
reading of an answer, so that an effect type the service does not handle fails type-checking
(``assert_never``), as it does in the simulator (``sim/interpreter.py``).

Where each is applied:

=======================  ==========================================================
``SetState``             a store transition of the job (``retry.transition_for`` after a
                         run's end, ``retry.change_for`` otherwise)
``HoldUntil``            the transition's ``not_before`` (the retry backoff)
``StartRun``             a lease: a ``RunRequest`` recorded with the cycle's writes, then
                         dispatched (``commit.py``, ``dispatch.py``)
``GrowRun``              the run grown and its replicas handed over (``growth.py``)
``StopRun``              the backend asked to stop the run (``commit.py`` for an eviction,
                         ``transitions.py`` for a cancel or a requeue)
``Offer``,               the snapshot builder's admission, from the change feed the
``FreeArraySlot``        transition produces (``admission.py``)
``WaitForDependencies``, the dependency gate, from the same feed (``dependencies.py``)
``ReleaseDependents``
=======================  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from flotilla.lifecycle.effects import (
    Effect,
    FreeArraySlot,
    GrowRun,
    HoldUntil,
    Offer,
    ReleaseDependents,
    SetState,
    StartRun,
    StopRun,
    WaitForDependencies,
)
from flotilla.lifecycle.machine import Transition


@dataclass(frozen=True, slots=True)
class Answer:
    """The core's answer about one job, by what the service does with each part."""

    state: SetState | None = None
    hold: HoldUntil | None = None
    start: StartRun | None = None
    grow: GrowRun | None = None
    stop: StopRun | None = None
    from_feed: tuple[Effect, ...] = ()
    """Effects the change feed of the job's transition applies (admission, dependencies)."""


def read(step: Transition) -> Answer:
    """Every effect of ``step``, each where the service applies it."""
    state = hold = start = grow = stop = None
    from_feed: list[Effect] = []
    for effect in step.effects:
        match effect:
            case SetState():
                state = effect
            case HoldUntil():
                hold = effect
            case StartRun():
                start = effect
            case GrowRun():
                grow = effect
            case StopRun():
                stop = effect
            case Offer() | FreeArraySlot() | WaitForDependencies() | ReleaseDependents():
                from_feed.append(effect)
            case _:
                assert_never(effect)
    return Answer(state, hold, start, grow, stop, tuple(from_feed))
