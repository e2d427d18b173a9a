"""A scheduling round's result as lifecycle events, per job: the one reading both hosts share.

The round (``framework.snapshot.CycleResult``) evicts some running jobs and places others;
each becomes an event of one job — ``Evicted`` for a victim, ``Scheduled`` for a placed
job (a waiting job's run starts; a running non-strict gang grows) — in the order the hosts
apply them: every eviction first (the room they make is what the placements count on),
then the placements in the round's order. The service (``service/commit.py``) and the
simulator (``sim/simulator.py``) step each through ``machine.step`` and apply the answer.
Typed by the shape the core reads (the core does not import the engine).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from flotilla.lifecycle.events import Evicted, Scheduled


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Placed(Protocol):
    @property
    def cluster(self) -> str: ...

    @property
    def placements(self) -> Sequence[object]: ...


class Decision(Protocol):
    """A placement of the round (``ScheduledJob``)."""

    @property
    def job(self) -> _Named: ...

    @property
    def assignment(self) -> _Placed: ...


class Eviction(Protocol):
    """A preemption of the round (``framework.snapshot.Eviction``)."""

    @property
    def job(self) -> str: ...

    @property
    def by(self) -> str: ...

    @property
    def reason(self) -> str: ...


D = TypeVar("D", bound=Decision)
D_co = TypeVar("D_co", bound=Decision, covariant=True)


class Round(Protocol[D_co]):
    """A round's result (``CycleResult``): what the events are read from."""

    @property
    def preempted(self) -> Sequence[Eviction]: ...

    @property
    def scheduled(self) -> Sequence[D_co]: ...


@dataclass(frozen=True, slots=True)
class Evict:
    """The victim ``job`` is evicted for ``by`` (a job, or a named gang)."""

    job: str
    event: Evicted
    by: str


@dataclass(frozen=True, slots=True)
class Place(Generic[D]):
    """The round placed ``job``: ``decision`` is the placement its ``StartRun`` or
    ``GrowRun`` takes."""

    job: str
    event: Scheduled
    decision: D


def evictions(result: Round[D]) -> Iterator[Evict]:
    """The round's evictions, each as its victim's event."""
    for eviction in result.preempted:
        yield Evict(eviction.job, Evicted(eviction.reason), eviction.by)


def placements(result: Round[D]) -> Iterator[Place[D]]:
    """The round's placements, each as its job's event."""
    for decision in result.scheduled:
        assignment = decision.assignment
        event = Scheduled(assignment.cluster, len(assignment.placements))
        yield Place(decision.job.name, event, decision)
