"""Node label affinity: required labels filter nodes, preferred labels score them."""

from __future__ import annotations

import numpy as np

from flotilla.framework.interfaces import FilterInput, ScoreInput
from flotilla.framework.nodes import Mask
from flotilla.framework.resources import Vector


class NodeAffinity:
    name = "node-affinity"
    row_local = True
    """A node's verdict and score read only its own labels."""

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
