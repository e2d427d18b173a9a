"""Node label affinity: required labels filter nodes, preferred labels score them.

A job spread over several topology domains (``SchedulingJob.node_domains``, set by the
engine for a preferred level no single domain can hold) is held to nodes of those domains
here too: the same filter, so every index and cache that knows this plugin knows it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flotilla.framework.interfaces import FilterInput, ScoreInput
from flotilla.framework.nodes import Mask
from flotilla.framework.resources import Vector


class NodeAffinity:
    name = "node-affinity"
    # Row-local: a node's verdict and score read only its own labels.

    def filter(self, request: FilterInput) -> Mask:
        nodes = request.cluster.nodes
        job = request.job
        if not job.affinity.nodes.required and not job.node_domains:
            return nodes.everywhere
        mask = _allowed(request)
        rows = request.rows
        return mask if rows is None else mask[rows]

    def row_filter(self, request: FilterInput) -> Callable[[int], bool] | None:
        """One node's verdict as a Python bool (the best-node index's path for a few changed
        rows); ``None`` when every node passes."""
        job = request.job
        if not job.affinity.nodes.required and not job.node_domains:
            return None
        verdict: Callable[[int], bool] = _allowed(request).item
        return verdict

    def explain(self, request: FilterInput, rejected: Mask) -> str | None:
        count = int(np.count_nonzero(rejected))
        nodes = f"{count} node{'s' if count != 1 else ''}"
        parts = []
        required = request.job.affinity.nodes.required
        if required:
            parts.append(
                "without required labels " + ", ".join(f"{k}={v}" for k, v in required.items())
            )
        if request.job.node_domains:
            shown = ", ".join("/".join(v for _, v in domain) for domain in request.job.node_domains)
            parts.append(f"outside the topology domains {shown}")
        return f"{nodes} " + " or ".join(parts)

    def score(self, request: ScoreInput) -> Vector | None:
        preferred = request.job.affinity.nodes.preferred
        if not preferred:
            return None
        nodes = request.cluster.nodes
        matched = np.zeros(len(request.candidates))
        for key, value in preferred.items():
            matched += nodes.label_mask(key, value)[request.candidates]
        result: Vector = matched / len(preferred)
        return result

    def row_score(self, request: FilterInput) -> Callable[[int], float] | None:
        """One node's score on Python floats: matches added in the same order from 0.0 (a
        match adds 1.0, as a ``True`` does in numpy), then divided, so the same float."""
        preferred = request.job.affinity.nodes.preferred
        if not preferred:
            return None
        nodes = request.cluster.nodes
        labelled: list[Callable[[int], bool]] = [
            nodes.label_mask(key, value).item for key, value in preferred.items()
        ]
        count = len(labelled)

        def matched(row: int) -> float:
            total = 0.0
            for verdict in labelled:
                total += verdict(row)
            return total / count

        return matched


def _allowed(request: FilterInput) -> Mask:
    """Every node (all rows) with the job's required labels and, when it names domains, in
    one of them."""
    nodes = request.cluster.nodes
    job = request.job
    mask = np.ones(len(nodes), dtype=bool)
    for key, value in job.affinity.nodes.required.items():
        mask &= nodes.label_mask(key, value)
    if job.node_domains:
        inside = np.zeros(len(nodes), dtype=bool)
        for domain in job.node_domains:
            member = np.ones(len(nodes), dtype=bool)
            for key, value in domain:
                member &= nodes.label_mask(key, value)
            inside |= member
        mask &= inside
    return mask
