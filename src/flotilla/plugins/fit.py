"""Resource fit on every dimension (Filter), and bin-packing or spreading (Score)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flotilla.framework.interfaces import FilterInput, ScoreInput
from flotilla.framework.nodes import Mask
from flotilla.framework.resources import EPSILON, Vector
from flotilla.model.quantity import format_quantity


class ResourcesFit:
    """A node fits a replica when its free amount covers the request on every resource."""

    name = "resources-fit"
    # Row-local: a node's verdict reads only its own free amounts.

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

    def row_filter(self, request: FilterInput) -> Callable[[int], bool] | None:
        """One node's verdict on Python floats: the best-node index re-asks about a few
        changed rows this way, cheaper than numpy calls (the same comparisons, so the same
        verdicts). ``None`` when every node passes."""
        wanted = request.task.wanted
        if len(wanted) == 0:
            return None
        item = request.cluster.nodes.free.item
        task = request.task.request
        needs = [(int(dim), float(task[dim]) - EPSILON) for dim in wanted]

        def fits(row: int) -> bool:
            # A plain loop: a generator in all() costs more than the comparisons here.
            for dim, need in needs:  # noqa: SIM110
                if not item(row, dim) >= need:
                    return False
            return True

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
        short_of = free < needs - EPSILON
        # The most free among the nodes short of each resource (another node may have more
        # and be out for another reason): the figure and the node it belongs to.
        fullest = np.where(short_of, free, -np.inf).argmax(axis=0)
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
                row = int(fullest[i])
                most = float(free[row, i])
                parts.append(
                    f"{short} node{'s' if short != 1 else ''} with too little free {name} "
                    f"(need {format_quantity(name, need)}, most free of them "
                    f"{format_quantity(name, max(most, 0.0))} on {nodes.names[row]})"
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


def _row_utilisation(request: FilterInput) -> Callable[[int], float]:
    """``_utilisation_after`` for one row on Python floats, for the best-node index: the same
    operations in the same order (sum of the columns left to right, then the mean), so the
    same float."""
    nodes = request.cluster.nodes
    wanted = request.task.wanted
    task = request.task.request
    terms = [(int(dim), float(task[dim])) for dim in wanted]
    count = len(terms)
    allocated = nodes.allocated.item
    inverse = nodes.inverse_capacity.item
    if count == 0:
        return lambda row: 0.0
    first_dim, first_need = terms[0]
    rest = terms[1:]

    def used(row: int) -> float:
        total: float = (allocated(row, first_dim) + first_need) * inverse(row, first_dim)
        for dim, need in rest:
            total += (allocated(row, dim) + need) * inverse(row, dim)
        return total / count

    return used


class BinPackScore:
    """Prefer the fullest node that fits (best fit): keeps whole nodes free for big jobs."""

    name = "binpack"

    def score(self, request: ScoreInput) -> Vector:
        return _utilisation_after(request)

    def row_score(self, request: FilterInput) -> Callable[[int], float]:
        """One node's score on Python floats (see ``ResourcesFit.row_filter``)."""
        return _row_utilisation(request)


class SpreadScore:
    """Prefer the emptiest node: spreads load and the blast radius of a node failure."""

    name = "spread"

    def score(self, request: ScoreInput) -> Vector:
        return 1.0 - _utilisation_after(request)

    def row_score(self, request: FilterInput) -> Callable[[int], float]:
        """One node's score on Python floats (see ``ResourcesFit.row_filter``)."""
        used = _row_utilisation(request)
        return lambda row: 1.0 - used(row)
