"""A third-party filter plugin as small as the contract allows: ``filter``, ``explain`` and
``score``, nothing else (no row-local capability, no knowledge of the engine's caches).

Nodes labelled ``maintenance=true`` take no new work; among the others, nodes labelled
``fast=true`` are preferred.
"""

from __future__ import annotations

import numpy as np

from flotilla.framework.interfaces import FilterInput, ScoreInput
from flotilla.framework.nodes import Mask
from flotilla.framework.resources import Vector


class KeepOffMaintenance:
    name = "keep-off-maintenance"

    def filter(self, request: FilterInput) -> Mask:
        mask: Mask = ~request.cluster.nodes.label_mask("maintenance", "true")
        return mask

    def explain(self, request: FilterInput, rejected: Mask) -> str | None:
        under = rejected & request.cluster.nodes.label_mask("maintenance", "true")
        count = int(np.count_nonzero(under))
        return f"{count} nodes are under maintenance" if count else None

    def score(self, request: ScoreInput) -> Vector:
        fast = request.cluster.nodes.label_mask("fast", "true")[request.candidates]
        return fast.astype(np.float64)
