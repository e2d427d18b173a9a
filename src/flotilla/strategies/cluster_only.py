"""Michelangelo's default strategy: the affinity cluster, else the first ready cluster.

The exact rule: among ready clusters that carry every required cluster label, take the one
with the most preferred labels; ties go to the cluster declared first. Free resources are not
consulted: if the job does not fit there now, it waits for that cluster — it is never sent
elsewhere. Predictable placement, at the price of idle capacity in other clusters (use
``resource-aware`` to spill over).
"""

from __future__ import annotations

from flotilla.framework.interfaces import Decision, SelectionInput, no_cluster_reason
from flotilla.strategies.common import preferred_matches


class ClusterOnlyStrategy:
    name = "cluster-only"

    def select(self, request: SelectionInput) -> Decision:
        if not request.clusters:
            return Decision(None, no_cluster_reason(request.job))
        if len(request.clusters) == 1:
            chosen = request.clusters[0]  # what min() returns, without ranking a lone cluster
        else:
            chosen = min(
                request.clusters,
                key=lambda cluster: (-preferred_matches(request.job, cluster), cluster.order),
            )
        decision = request.place(chosen)
        if decision.found:
            return Decision(decision.assignment, f"cluster-only: {chosen.name}")
        return Decision(
            None,
            f"cluster-only assigns cluster {chosen.name}, which has no room: {decision.reason}",
        )
