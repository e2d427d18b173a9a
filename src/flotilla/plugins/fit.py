"""Resource fit on every dimension (Filter), and bin-packing or spreading (Score)."""

from __future__ import annotations

import numpy as np

from flotilla.framework.interfaces import FilterInput, ScoreInput
from flotilla.framework.nodes import Mask
from flotilla.framework.resources import EPSILON, Vector
from flotilla.model.quantity import format_quantity


class ResourcesFit:
    """A node fits a replica when its free amount covers the request on every resource."""

    name = "resources-fit"
    row_local = True
    """A node's verdict reads only its own free amounts."""

    def filter(self, request: FilterInput) -> Mask:
        nodes = request.cluster.nodes
        wanted = request.task.wanted
        if len(wanted) == 0:
            return nodes.everywhere
        task = request.task.request
        rows = request.rows
        if rows is not None:
            # A few changed rows: one gather, one comparison (same floats as per column).
            enough: Mask = nodes.free[rows[:, np.newaxis], wanted] >= task[wanted] - EPSILON
            fits_rows: Mask = np.asarray(enough.all(axis=1), dtype=bool)
            return fits_rows
        fits: Mask | None = None
        for dim in wanted:
            column = nodes.free[:, dim] >= task[dim] - EPSILON
            fits = column if fits is None else np.logical_and(fits, column, out=fits)
        assert fits is not None
        return fits

    def explain(self, request: FilterInput, rejected: Mask) -> str | None:
        # All requested resources at once (a handful of numpy calls, not a handful per
        # resource): element-wise the same floats, so the same counts and maxima.
        nodes = request.cluster.nodes
        wanted = request.task.wanted
        if len(wanted) == 0:
            return None
        needs = request.task.request[wanted]
        free = nodes.capacity[:, wanted] - nodes.allocated[:, wanted]
        shorts = np.count_nonzero(free < needs - EPSILON, axis=0)
        if not shorts.any():
            return None  # also when there are no nodes: nothing below reads an empty column
        most_free = free.max(axis=0)
        largest = nodes.capacity[:, wanted].max(axis=0, initial=0.0)
        parts = []
        for i, dim in enumerate(wanted.tolist()):
            short = int(shorts[i])
            if not short:
                continue
            name = nodes.space.names[dim]
            need = float(needs[i])
            if float(largest[i]) < need - EPSILON:
                parts.append(
                    f"no node has {format_quantity(name, need)} {name} at all "
                    f"(largest {format_quantity(name, float(largest[i]))})"
                )
            else:
                most = float(most_free[i])
                parts.append(
                    f"{short} node{'s' if short != 1 else ''} with too little free {name} "
                    f"(need {format_quantity(name, need)}, most free "
                    f"{format_quantity(name, max(most, 0.0))})"
                )
        return "; ".join(parts) or None


_FEW_CANDIDATES = 16
"""Below one candidate in this many nodes, scoring gathers the candidates' rows first."""


def _utilisation_after(request: ScoreInput) -> Vector:
    """Mean share of each requested resource in use on each candidate after placing.

    Computed over whole contiguous columns and gathered once: cheaper than indexing the
    candidates per resource. Candidates passed resources-fit, so they have every resource
    the task asks for."""
    nodes = request.cluster.nodes
    wanted = request.task.wanted
    candidates = request.candidates
    if len(wanted) == 0:
        return np.zeros(len(candidates))
    task = request.task.request
    if len(candidates) * _FEW_CANDIDATES < len(nodes):
        # A few rows (the best-node index re-scoring changed nodes): gather them first. The
        # element-wise arithmetic is the same, so each score is the same float. Columns are
        # added left to right like the whole-column loop (0.0 + x is x exactly).
        cells = candidates[:, np.newaxis], wanted
        used = (nodes.allocated[cells] + task[wanted]) * nodes.inverse_capacity[cells]
        few = used[:, 0].copy()
        for column in range(1, len(wanted)):
            few += used[:, column]
        few_result: Vector = few / len(wanted)
        return few_result
    total = np.zeros(len(nodes))
    for dim in wanted:
        total += (nodes.allocated[:, dim] + task[dim]) * nodes.inverse_capacity[:, dim]
    result: Vector = total[request.candidates] / len(wanted)
    return result


class BinPackScore:
    """Prefer the fullest node that fits (best fit): keeps whole nodes free for big jobs."""

    name = "binpack"
    row_local = True

    def score(self, request: ScoreInput) -> Vector:
        return _utilisation_after(request)


class SpreadScore:
    """Prefer the emptiest node: spreads load and the blast radius of a node failure."""

    name = "spread"
    row_local = True

    def score(self, request: ScoreInput) -> Vector:
        return 1.0 - _utilisation_after(request)
