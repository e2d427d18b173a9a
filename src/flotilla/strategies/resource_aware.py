"""A ready cluster where the whole job fits now, preferring the best fit.

Rule: among ready clusters carrying every required label where every replica can be placed
now, take the one with the most preferred labels, then — for a job that asks for no GPU — the
one that puts fewest of its replicas on GPU nodes (as Slurm sites keep CPU work off GPU
partitions: a CPU job on a GPU node strands the GPUs' share of cores and memory), then the
tightest fit (least capacity left free on the resources the job asks for), then the one
declared first.
"""

from __future__ import annotations

from flotilla.framework.interfaces import Decision, SelectionInput
from flotilla.strategies.common import (
    best_fitting,
    gpu_nodes_taken,
    leftover_share,
    preferred_matches,
)


class ResourceAwareStrategy:
    name = "resource-aware"

    def select(self, request: SelectionInput) -> Decision:
        job = request.job
        return best_fitting(
            request,
            lambda cluster, decision: (
                -preferred_matches(job, cluster),
                gpu_nodes_taken(job, cluster, decision),
                leftover_share(job, cluster),
            ),
            "resource-aware best fit",
        )
