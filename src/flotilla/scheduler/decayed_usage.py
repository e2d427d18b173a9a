"""Fair share with memory: each queue's usage in resource-seconds, decayed with a half-life.

Slurm (``PriorityDecayHalfLife``), HTCondor (``PRIORITY_HALFLIFE``), Kueue's admission fair
sharing (``usageHalfLifeTime``) and KAI order teams by what they used lately, not only by what
they hold now: a queue that ran the whole fleet all night ranks behind a fresh one next
morning. Usage at time ``t`` is ``U(t) = ∫ A(s) · 2^(-(t - s) / half_life) ds`` over the past,
``A(s)`` being what the queue's running jobs held at ``s`` (one number per resource).

The engine keeps one accumulator per queue and advances it with the elapsed time at each
round, so a round costs O(queues), never a scan of run history. Over a step of ``Δ`` seconds
with the allocation ``A`` held throughout, the integral is exact::

    U ← U · 2^(-Δ/h) + A · τ · (1 − 2^(-Δ/h)),     τ = h / ln 2 (the mean lifetime)

Slurm's decay thread does ``U ← U · 2^(-Δ/h) + A · Δ`` every ``PriorityCalcPeriod``; the two
agree as ``Δ/h → 0``, and the exact form does not depend on how often rounds run, so the
simulator and the service (which run rounds at different times) charge the same usage.

The ordering reads usage as ``U / τ``: what the queue held on average over the decay window,
in the same units as an allocation (a queue that holds ``A`` forever converges to ``U / τ =
A``). ``DrfOrder`` adds it to the queue's current allocation before taking the dominant share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from flotilla.framework.resources import Vector
from flotilla.framework.snapshot import SchedulingSnapshot


class DecayedUsage:
    """Per-queue decayed usage, advanced by the rounds the engine runs.

    ``observe(now, allocated)`` at the start of a round charges each queue what it held since
    the previous round (the allocation that round left, ``hold``) and returns the usage the
    round orders by; ``hold(allocated)`` after the round records what the round left running.
    A job that ends between two rounds is charged up to the first round that no longer sees
    it: the simulator runs a round at every job end, the service at least every cycle.
    """

    def __init__(self, half_life: float) -> None:
        if not half_life > 0:
            raise ValueError("usage_half_life must be positive")
        self.half_life = half_life
        self.mean_life = half_life / math.log(2)
        self._usage: dict[str, list[float]] = {}
        """Queue → resource-seconds decayed to ``_time``."""
        self._held: dict[str, list[float]] = {}
        """Queue → what it held since ``_time`` (charged at the next ``advance``)."""
        self._time: float | None = None
        self._named_seed: tuple[float, Mapping[str, Mapping[str, float]]] | None = None
        """Usage by resource name waiting for a snapshot's resource space (``seed_named``)."""

    @property
    def time(self) -> float | None:
        return self._time

    def advance(self, now: float) -> None:
        """Decay every queue's usage to ``now`` and charge what each held meanwhile."""
        if self._time is None:
            self._time = now
            return
        elapsed = now - self._time
        if elapsed <= 0:
            return
        # keep = 2^(-Δ/h); gain = τ(1 - keep), with expm1 so that a short step keeps its digits.
        exponent = -elapsed * math.log(2) / self.half_life
        keep = math.exp(exponent)
        gain = -self.mean_life * math.expm1(exponent)
        for queue in self._usage.keys() | self._held.keys():
            usage = self._usage.get(queue, [])
            held = self._held.get(queue, [])
            size = max(len(usage), len(held))
            self._usage[queue] = [
                (usage[i] if i < len(usage) else 0.0) * keep
                + (held[i] if i < len(held) else 0.0) * gain
                for i in range(size)
            ]
        self._time = now

    def hold(self, allocated: Mapping[str, Vector]) -> None:
        """From now until the next ``advance``, each queue holds ``allocated[queue]``."""
        self._held = {queue: amount.tolist() for queue, amount in allocated.items()}

    def observe(self, now: float, allocated: Mapping[str, Vector]) -> dict[str, list[float]]:
        """Advance to ``now``, then hold ``allocated``; returns each queue's usage as an
        average allocation (``U / τ``) for the round to order by."""
        self.advance(now)
        self.hold(allocated)
        return self.averages()

    def averages(self) -> dict[str, list[float]]:
        """Each queue's decayed usage divided by the mean lifetime τ: resources held on
        average over the decay window, comparable with an allocation."""
        inverse = 1.0 / self.mean_life
        return {
            queue: [amount * inverse for amount in usage] for queue, usage in self._usage.items()
        }

    def usage(self) -> dict[str, list[float]]:
        """Each queue's decayed usage in resource-seconds at ``time``."""
        return {queue: list(usage) for queue, usage in self._usage.items()}

    def seed(self, now: float, usage: Mapping[str, list[float]]) -> None:
        """Start from usage derived elsewhere (run history read back after a restart)."""
        self._usage = {queue: list(amounts) for queue, amounts in usage.items()}
        self._time = now

    def seed_named(self, at: float, by_queue: Mapping[str, Mapping[str, float]]) -> None:
        """Start from usage derived from run history (queue → resource name → resource-
        seconds decayed to ``at``: ``store.decayed_usage``), taken up by the next snapshot,
        whose resource space orders the names."""
        self._named_seed = (at, by_queue)

    def take_seed(self, snapshot: SchedulingSnapshot) -> None:
        seed = self._named_seed
        if seed is None or not snapshot.clusters:
            return
        self._named_seed = None
        at, by_queue = seed
        index = snapshot.clusters[0].nodes.space.index
        vectors: dict[str, list[float]] = {}
        for queue, amounts in by_queue.items():
            vector = [0.0] * len(index)
            for name, amount in amounts.items():
                if name in index:  # a resource no cluster has any more orders nothing
                    vector[index[name]] += amount
            vectors[queue] = vector
        self.seed(at, vectors)


def queue_allocations(snapshot: SchedulingSnapshot) -> dict[str, Vector]:
    """What each queue's running jobs hold in ``snapshot`` (as the round computes it)."""
    given = snapshot.backlog.allocated if snapshot.backlog is not None else None
    if given is not None:
        return {queue: np.asarray(amount, dtype=np.float64) for queue, amount in given.items()}
    size = len(snapshot.clusters[0].nodes.space) if snapshot.clusters else 0
    allocated: dict[str, Vector] = {}
    for running in snapshot.running:
        held = running.held(size)
        queue = running.job.queue
        allocated[queue] = allocated[queue] + held if queue in allocated else held.copy()
    return allocated


def decayed_run_usage(
    amount: list[float], start: float, end: float, now: float, half_life: float
) -> list[float]:
    """What holding ``amount`` from ``start`` to ``end`` adds to usage decayed to ``now``:
    ``amount · τ · (2^(-(now-end)/h) − 2^(-(now-start)/h))``. Used to derive usage from run
    history, and the reference the accumulator is tested against."""
    if end <= start:
        return [0.0] * len(amount)
    mean_life = half_life / math.log(2)
    factor = mean_life * (2.0 ** (-(now - end) / half_life) - 2.0 ** (-(now - start) / half_life))
    return [value * factor for value in amount]
