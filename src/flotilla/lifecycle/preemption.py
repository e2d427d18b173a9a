"""Preemption that waits for its victims: the rule both hosts keep, and its words.

A preemptor starts only once every victim's run has stopped (or its grace and kill have
passed), as Slurm's ``GraceTime`` and Kubernetes' ``terminationGracePeriodSeconds`` do: until
then each victim's resources stay allocated, the victim is no candidate for another
preemption, and the preemptor is held out of the backlog with a reason naming whom it waits
for. Once the last victim stopped, the preemptor is offered again and the next round places
it. The service learns of a stop from its backend; the simulator at the end of the victim's
grace (``preemption.grace``; a job without one stops at once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from flotilla.model.job import JobSpec

T = TypeVar("T")


def victims_of(stopping: Mapping[str, Sequence[T]], job: str, gang: str | None) -> Sequence[T]:
    """The victims still stopping that ``job`` was placed by evicting: a round evicts for a
    job, or for a named ``gang`` of which ``job`` is a member (``Eviction.by``)."""
    return stopping.get(job) or (stopping.get(gang, ()) if gang else ())


def grace_of(spec: JobSpec) -> float:
    """Seconds the simulator gives a victim to stop: its ``preemption.grace``, else none."""
    return spec.preemption.grace if spec.preemption is not None else 0.0


def waits_for_victims(victims: Iterable[str]) -> str:
    """Why a preemptor waits: ``waits for job old to stop (preempted to make room for it)``."""
    return f"waits for {', '.join(sorted(victims))} to stop (preempted to make room for it)"


class VictimWaits:
    """Which preemptors wait for which victims' runs to stop; each side by its id (the
    service's job ids, the simulator's names)."""

    def __init__(self) -> None:
        self._victims: dict[str, set[str]] = {}
        """Preemptor → the victims it still waits for."""
        self._preemptors: dict[str, set[str]] = {}
        """Victim → the preemptors waiting for it."""
        self._labels: dict[str, str] = {}

    def wait(self, preemptor: str, victims: dict[str, str]) -> str:
        """``preemptor`` waits for ``victims`` (id → label) to stop; the reason it waits."""
        waiting = self._victims.setdefault(preemptor, set())
        for victim, label in victims.items():
            waiting.add(victim)
            self._labels[victim] = label
            self._preemptors.setdefault(victim, set()).add(preemptor)
        return self.reason(preemptor)

    def reason(self, preemptor: str) -> str:
        return waits_for_victims(self._labels[v] for v in self._victims.get(preemptor, ()))

    def waiting(self, preemptor: str) -> bool:
        return preemptor in self._victims

    def waiting_ids(self) -> list[str]:
        return list(self._victims)

    def stopped(self, victim: str) -> list[str]:
        """``victim``'s run stopped: the preemptors that wait for nothing more now."""
        self._labels.pop(victim, None)
        released = []
        for preemptor in sorted(self._preemptors.pop(victim, ())):
            waiting = self._victims.get(preemptor)
            if waiting is None:
                continue
            waiting.discard(victim)
            if not waiting:
                del self._victims[preemptor]
                released.append(preemptor)
        return released

    def forget(self, preemptor: str) -> None:
        """``preemptor`` left the queue (cancelled, failed): it waits for nothing."""
        for victim in self._victims.pop(preemptor, ()):
            preemptors = self._preemptors.get(victim)
            if preemptors is not None:
                preemptors.discard(preemptor)

    def clear(self) -> None:
        self._victims.clear()
        self._preemptors.clear()
        self._labels.clear()
