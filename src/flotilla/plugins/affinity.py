"""Node label affinity: required labels filter nodes, preferred labels score them."""

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
        required = request.job.affinity.nodes.required
        if not required:
            return nodes.everywhere
        rows = request.rows
        mask = np.ones(len(nodes) if rows is None else len(rows), dtype=bool)
        for key, value in required.items():
            labelled = nodes.label_mask(key, value)
            mask &= labelled if rows is None else labelled[rows]
        return mask

    def row_filter(self, request: FilterInput) -> Callable[[int], bool] | None:
        """One node's verdict as a Python bool (the best-node index's path for a few changed
        rows); ``None`` when every node passes."""
        required = request.job.affinity.nodes.required
        if not required:
            return None
        nodes = request.cluster.nodes
        mask = np.ones(len(nodes), dtype=bool)
        for key, value in required.items():
            mask &= nodes.label_mask(key, value)
        verdict: Callable[[int], bool] = mask.item
        return verdict

    def explain(self, request: FilterInput, rejected: Mask) -> str | None:
        count = int(np.count_nonzero(rejected))
        labels = ", ".join(f"{k}={v}" for k, v in request.job.affinity.nodes.required.items())
        return f"{count} node{'s' if count != 1 else ''} without required labels {labels}"

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
