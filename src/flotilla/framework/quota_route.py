"""The per-node layout that makes quota admission and charging cheap.

A ``QuotaRoute`` holds one quota node's path to the root as flat lists of Python floats (the
limits the admission check compares against) and as index arrays (the nodes whose sibling
totals change when usage changes along the path). ``QuotaTree.route`` builds one per node,
once; ``QuotaUsage`` in ``framework/quota.py`` uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from flotilla.framework.quota import QuotaTree

Matrix = npt.NDArray[np.float64]
IndexArray = npt.NDArray[np.intp]

SIBLING_TOLERANCE = 1e-9
"""Relative bound on how far the fast path's sibling sum can be from the exact loop's.

Both sums add the same k non-negative terms in different orders (the fast one keeps the
siblings' total and subtracts the node's own term), so they differ by at most about
(2k + 3)·2⁻⁵³ times the sum; half of 1e-9 covers two million siblings. Within that distance
of a pool the fast path does not decide and the exact loop does."""


@dataclass(frozen=True)
class QuotaRoute:
    """One quota node's path to its root, laid out for a fast admission check.

    The limits are flat lists of Python floats, step after step (the node first, the root
    last), one value per resource: for the few numbers of a path, float arithmetic in Python
    is several times cheaper than numpy calls, and it is the same IEEE arithmetic.
    """

    path: IndexArray
    steps: list[int]
    parents: list[int | None]
    ceiling_limit: list[float]
    """``max + ε`` per step and resource."""
    kept: list[float]
    """What each step keeps of its guarantee; 0 for the root, which has no siblings."""
    pool_clear: list[float]
    """At or below this a step's sibling total surely passes its parent's ``pool + ε``
    (the root: its own pool, compared exactly)."""
    pool_over: list[float]
    """Above this the sibling total surely exceeds it; in between the exact loop decides."""
    children: IndexArray
    """Every child of every parent on the path (the path's steps and their siblings): the
    nodes whose siblings' total changes when usage changes along the path."""
    children_cells: IndexArray
    """The flat indices of ``children``'s rows in a (nodes × resources) matrix."""
    children_kept: Matrix
    starts: IndexArray
    """Where each parent's children start in ``children`` (for ``np.add.reduceat``)."""
    parent_slot: IndexArray
    """For each entry of ``children``, its parent's position among the path's parents."""

    @staticmethod
    def build(tree: QuotaTree, node: int) -> QuotaRoute:
        path = tree.paths[node]
        root = path[-1]
        parents = path[1:]
        width = len(tree.space)
        pool_limit = tree.pool_limit[[*parents, root]]
        clear = pool_limit * (1.0 - SIBLING_TOLERANCE)
        over = pool_limit * (1.0 + SIBLING_TOLERANCE)
        clear[-1] = over[-1] = pool_limit[-1]  # the root's check has no sum: exact
        kept = tree.kept[path].copy()
        kept[-1] = 0.0
        children: list[int] = []
        starts: list[int] = []
        parent_slot: list[int] = []
        for slot, parent in enumerate(parents):
            starts.append(len(children))
            children.extend(tree.children[parent])
            parent_slot.extend([slot] * len(tree.children[parent]))
        child_index = np.array(children, dtype=np.intp)
        return QuotaRoute(
            path=np.array(path, dtype=np.intp),
            steps=list(path),
            parents=[tree.parent[step] for step in path],
            ceiling_limit=tree.ceiling_limit[path].ravel().tolist(),
            kept=kept.ravel().tolist(),
            pool_clear=clear.ravel().tolist(),
            pool_over=over.ravel().tolist(),
            children=child_index,
            children_cells=(child_index[:, None] * width + np.arange(width)).ravel(),
            children_kept=tree.kept[child_index],
            starts=np.array(starts, dtype=np.intp),
            parent_slot=np.array(parent_slot, dtype=np.intp),
        )
