"""Taints and tolerations: a NoSchedule/NoExecute taint admits only jobs that tolerate it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flotilla.framework.interfaces import FilterInput
from flotilla.framework.nodes import Mask, NodeTable
from flotilla.model.cluster import Taint
from flotilla.model.job import Toleration


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes semantics: empty key with Exists matches every taint; Equal without a value
    matches only a taint whose value is empty."""
    if toleration.effect is not None and toleration.effect != taint.effect:
        return False
    if toleration.key == "":
        return toleration.operator == "Exists"
    if toleration.key != taint.key:
        return False
    # Kubernetes: Equal compares values, and a missing value is the empty string.
    return toleration.operator == "Exists" or (toleration.value or "") == taint.value


def tolerated_mask(nodes: NodeTable, tolerations: Sequence[Toleration]) -> Mask:
    """Nodes all of whose hard taints are tolerated; cached per toleration set on the table."""
    if not nodes.any_hard_taints:
        return nodes.everywhere
    return nodes.static_mask(
        ("tolerations", tuple(tolerations)),
        lambda: np.array(
            [
                all(any(tolerates(t, taint) for t in tolerations) for taint in node_taints)
                for node_taints in nodes.hard_taints
            ],
            dtype=bool,
        ),
    )


class TaintToleration:
    name = "taint-toleration"
    # Row-local: a node's verdict reads only its own taints and the job's tolerations.

    def filter(self, request: FilterInput) -> Mask:
        nodes = request.cluster.nodes
        mask = tolerated_mask(nodes, request.job.tolerations)
        if request.rows is None or mask is nodes.everywhere:
            return mask
        subset: Mask = mask[request.rows]
        return subset

    def row_filter(self, request: FilterInput) -> Callable[[int], bool] | None:
        """One node's verdict as a Python bool (the best-node index's path for a few changed
        rows; the mask is cached per table); ``None`` when every node passes."""
        nodes = request.cluster.nodes
        mask = tolerated_mask(nodes, request.job.tolerations)
        if mask is nodes.everywhere:
            return None
        verdict: Callable[[int], bool] = mask.item
        return verdict

    def explain(self, request: FilterInput, rejected: Mask) -> str | None:
        nodes = request.cluster.nodes
        taints = sorted(
            {
                f"{t.key}={t.value}:{t.effect}"
                for row in np.flatnonzero(rejected)
                for t in nodes.hard_taints[row]
                if not any(tolerates(tol, t) for tol in request.job.tolerations)
            }
        )
        count = int(np.count_nonzero(rejected))
        return f"{count} node{'s' if count != 1 else ''} with untolerated taint {', '.join(taints)}"
