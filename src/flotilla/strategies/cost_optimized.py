"""The cheapest ready cluster where the whole job fits now, by the cluster's ``cost``.

Rule: among ready clusters carrying every required label where every replica can be placed
now, take the one with the most preferred labels, then the lowest hourly price of the job
(request × the cluster's unit prices, memory per GiB), then the one declared first.
"""

from __future__ import annotations

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Decision, SelectionInput
from flotilla.strategies.common import best_fitting, hourly_cost, preferred_matches


class CostOptimizedStrategy:
    name = "cost-optimized"

    def select(self, request: SelectionInput) -> Decision:
        job = request.job

        def rank(cluster: Cluster, _: Decision) -> tuple[float, ...]:
            price = hourly_cost(job, cluster, cluster.nodes.space.names)
            return (-preferred_matches(job, cluster), price)

        return best_fitting(request, rank, "cost-optimized cheapest fit")
