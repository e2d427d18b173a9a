"""What the engine may know of quota state, without knowing which plugin keeps it.

The quota plugin (``plugins/quota.py``) computes each round's usage and publishes it as a
``QuotaView`` in ``CycleState.quota``; the round's ``PreemptionContext`` answers PostFilter
plugins from it (which quota node a queue draws on, whether two queues share a cohort, what a
queue borrows, whether a job stays within its guarantee). The view reads the plugin's live
usage, so the what-if evictions of preemption show in its answers. Without a quota tree (or
without a quota plugin) ``CycleState.quota`` stays ``None`` and every queue is unconstrained.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flotilla.framework.quota import QuotaUsage
from flotilla.framework.resources import Vector


@dataclass
class QuotaView:
    usage: QuotaUsage
    """The round's usage per quota node, changed as jobs are charged and evicted."""
    node_of_queue: Mapping[str, int]
    """The quota node each queue with a quota draws on."""

    def node(self, queue: str) -> int | None:
        return self.node_of_queue.get(queue)

    def same_cohort(self, queue: str, other: str) -> bool:
        """Both queues draw on quota nodes under one root of the quota tree."""
        mine, theirs = self.node_of_queue.get(queue), self.node_of_queue.get(other)
        if mine is None or theirs is None:
            return False
        tree = self.usage.tree
        return tree.cohort_root(mine) == tree.cohort_root(theirs)

    def borrowed(self, queue: str) -> Vector | None:
        """What the queue's quota node uses above its guarantee (``None`` without a quota)."""
        node = self.node_of_queue.get(queue)
        return None if node is None else self.usage.borrowed(node)

    def within_guarantee(self, queue: str, amount: Vector) -> bool:
        """The queue stays within its guarantee with ``amount`` more (False without a quota)."""
        node = self.node_of_queue.get(queue)
        return node is not None and self.usage.within_guarantee(node, amount)
