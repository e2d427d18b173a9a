"""The elastic quota tree: guarantees, ceilings, lending, and runtime quota.

Semantics (``docs/policies.md`` states them with scenarios):

* ``guaranteed(n)`` = ``min(n)`` + the guarantees of n's children (a Kueue cohort's nominal
  quota); ``pool(n)`` = ``max(n)`` where set, else ``guaranteed(n)``. A resource that neither
  n's ``max`` nor any ``min`` in its subtree names is unbounded at n.
* A queue's usage counts against its quota node and every ancestor.
* Admission of a request x at node n, checked on every node of the path to the root:
  usage + x ≤ ``max`` (the ceiling); and the parent's pool must hold every child's
  ``max(usage, kept)``, where ``kept`` is the part of a child's guarantee it does not lend
  (``guaranteed − lending_limit``; 0 without a lending limit). So a node borrows only what
  its siblings leave unused, less their lending limits, and never above its own max.
* Runtime quota (Koordinator): top-down, each child first gets what it needs (usage plus
  queued demand) up to its guarantee; the parent's spare is then split between the children
  that want more, in proportion to their weights, never above their max or demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from flotilla.framework.quota_route import IndexArray, Matrix, QuotaRoute
from flotilla.framework.resources import EPSILON, ResourceSpace, Vector
from flotilla.model.quantity import format_quantity
from flotilla.model.queue import QuotaSpec


class QuotaTree:
    """The static tree: one row per quota node, one column per resource."""

    def __init__(self, specs: Sequence[QuotaSpec], space: ResourceSpace) -> None:
        self.space = space
        self.names: list[str] = []
        self.parent: list[int | None] = []
        self.children: list[list[int]] = []
        minimum: list[Vector] = []
        maximum: list[Vector] = []
        lending: list[Vector] = []
        weights: list[float] = []
        named: list[npt.NDArray[np.bool_]] = []

        def add(spec: QuotaSpec, parent: int | None) -> None:
            index = len(self.names)
            self.names.append(spec.name)
            self.parent.append(parent)
            self.children.append([])
            if parent is not None:
                self.children[parent].append(index)
            minimum.append(_vector(space, spec.min, 0.0))
            maximum.append(_vector(space, spec.max or {}, np.inf))
            lending.append(_vector(space, spec.lending_limit or {}, np.inf))
            weights.append(spec.weight)
            mentions = np.zeros(len(space), dtype=bool)
            for name in list(spec.min) + list(spec.max or {}):
                if name in space.index:
                    mentions[space.index[name]] = True
            named.append(mentions)
            for child in spec.children:
                add(child, index)

        for spec in specs:
            add(spec, None)
        size = len(self.names)
        width = len(space)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.minimum = np.array(minimum).reshape(size, width)
        self.ceiling = np.array(maximum).reshape(size, width)
        self.weight = np.array(weights)
        self.guaranteed = self.minimum.copy()
        mentioned = np.array(named).reshape(size, width)
        for node in reversed(range(size)):  # children come after their parent
            for child in self.children[node]:
                self.guaranteed[node] += self.guaranteed[child]
                mentioned[node] |= mentioned[child]
        lendable = np.array(lending).reshape(size, width)
        self.kept = np.maximum(self.guaranteed - lendable, 0.0)
        self.pool = np.where(np.isfinite(self.ceiling), self.ceiling, self.guaranteed)
        self.bounded = mentioned | np.isfinite(self.ceiling)
        """Per node, the resources its quota limits at all; the others are unbounded there."""
        self.pool = np.where(self.bounded, self.pool, np.inf)
        self.paths = [self._path(node) for node in range(size)]
        self.path_length = np.array([len(path) for path in self.paths], dtype=np.intp)
        self.path_table = np.zeros((size, int(self.path_length.max(initial=0))), dtype=np.intp)
        """Row n: node n's path (node first), padded past ``path_length[n]``."""
        for node, path in enumerate(self.paths):
            self.path_table[node, : len(path)] = path
        self.ceiling_limit = self.ceiling + EPSILON
        self.pool_limit = self.pool + EPSILON
        self._routes: dict[int, QuotaRoute] = {}

    def __len__(self) -> int:
        return len(self.names)

    def _path(self, node: int) -> list[int]:
        path = [node]
        while (parent := self.parent[path[-1]]) is not None:
            path.append(parent)
        return path

    def route(self, node: int) -> QuotaRoute:
        """The index arrays and limits admission and charging need for ``node``'s path,
        built once per node so that a decision is a few whole-path numpy operations."""
        route = self._routes.get(node)
        if route is None:
            route = self._routes[node] = QuotaRoute.build(self, node)
        return route

    def add_along_paths(
        self, matrix: Matrix, nodes: IndexArray, amounts: Matrix, *, chunk: int = 16_384
    ) -> None:
        """Add ``amounts[i]`` to every step of ``nodes[i]``'s path, in place.

        The same sums, in the same order, as adding one job after another step by step:
        ``np.add.at`` applies its pairs in order, and they are listed job by job (in chunks
        taken in order, to bound the temporary arrays), so each row receives its jobs'
        amounts in the jobs' order. Exact, and without a Python loop over the jobs."""
        for start in range(0, len(nodes), chunk):
            part = nodes[start : start + chunk]
            lengths = self.path_length[part]
            job = np.repeat(np.arange(len(part)), lengths)
            first = np.cumsum(lengths) - lengths
            position = np.arange(len(job)) - np.repeat(first, lengths)
            rows = self.path_table[part[job], position]
            np.add.at(matrix, rows, amounts[start : start + chunk][job])

    def cohort_root(self, node: int) -> int:
        return self.paths[node][-1]

    def usage(self) -> QuotaUsage:
        return QuotaUsage(self)


@dataclass(frozen=True)
class QuotaVerdict:
    ok: bool
    reason: str | None = None
    soft: bool = False
    """Refused only by runtime quota (the weighted share of spare), not by a hard limit."""


_ADMITTED = QuotaVerdict(True)


class QuotaUsage:
    """Usage per quota node during one round, with admission checks and runtime quota.

    Change ``used`` only through ``add`` and ``remove``: they also keep ``others`` (per node,
    what its siblings hold: the sum of their ``max(used, kept)``), which lets ``admit`` check
    the whole path at once instead of walking every step's siblings.
    """

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self.used = np.zeros_like(tree.minimum)
        self.runtime = np.full_like(tree.minimum, np.inf)
        self.runtime_limit = np.full_like(tree.minimum, np.inf)
        """Per node, the usage above which the runtime-quota check refuses: the larger of
        ``guaranteed + ε`` and ``runtime + ε`` where the quota bounds the resource."""
        self.others = np.zeros_like(tree.minimum)
        self._kept_matrix: Matrix = tree.kept
        """Per node, what it keeps toward its siblings: the tree's ``kept`` until a
        reservation (``reserve``) raises it for this round (then a copy)."""
        self._refresh_all_siblings()
        self._runtime_reasons: dict[tuple[int, int, float, float], str] = {}
        self._routes: dict[int, QuotaRoute] = {}
        self._runtime_limits: dict[int, list[float]] = {}

    def reserve(self, node: int, amount: Vector) -> Vector:
        """Keep up to ``amount`` of the node's unused guarantee from its siblings for the rest
        of the round (Kueue's ``resourcesToReserve`` for a lender that cannot reclaim later):
        borrowers can no longer take it, while the node's own jobs may still use it. Returns
        what was reserved (zero where nothing of the guarantee is unused).

        The reservation raises what the node (and each ancestor below the root) keeps toward
        its siblings to at least its usage plus the reservation; admission then reads that
        ``kept``, on the fast path as on the exact one."""
        tree = self.tree
        unused = np.maximum(tree.guaranteed[node] - self.used[node], 0.0)
        held: Vector = np.where(tree.bounded[node], np.minimum(amount, unused), 0.0)
        if not np.any(held > EPSILON):
            return held
        kept = self._kept_matrix
        changed = False
        for step in tree.paths[node][:-1]:  # the root has no siblings to keep it from
            floor = self.used[step] + held
            if np.any(floor > kept[step] + EPSILON):
                if kept is tree.kept:
                    kept = self._kept_matrix = tree.kept.copy()
                np.maximum(kept[step], floor, out=kept[step])
                changed = True
        if changed:
            self._routes.clear()
            self._refresh_all_siblings()
        return held

    def _kept(self, node: int) -> Vector:
        """What ``node`` holds toward its siblings whatever its usage: the part of its
        guarantee it does not lend, raised by a reservation this round."""
        kept: Vector = self._kept_matrix[node]
        return kept

    def add(self, node: int, amount: Vector) -> None:
        route = self._routes.get(node) or self._route(node)
        np.add.at(self.used, route.path, amount)
        self._refresh_siblings(route)

    def remove(self, node: int, amount: Vector) -> None:
        route = self._routes.get(node) or self._route(node)
        np.subtract.at(self.used, route.path, amount)
        np.maximum(self.used, 0.0, out=self.used)
        self._refresh_siblings(route)

    def add_many(self, nodes: IndexArray, amounts: Matrix) -> None:
        """``add(nodes[i], amounts[i])`` for every i, in order, with the same result."""
        self.tree.add_along_paths(self.used, nodes, amounts)
        self._refresh_all_siblings()

    def _refresh_all_siblings(self) -> None:
        for children in self.tree.children:
            if children:
                held = np.maximum(self.used[children], self._kept_matrix[children])
                self.others[children] = held.sum(axis=0) - held

    def _refresh_siblings(self, route: QuotaRoute) -> None:
        """Recompute ``others`` for every child of the path's parents (their siblings'
        total is all that changed), from the current usage, so no rounding accumulates."""
        if not len(route.children):
            return
        held = np.maximum(self.used.take(route.children, axis=0), route.children_kept)
        totals = np.add.reduceat(held, route.starts, axis=0)
        self.others.put(route.children_cells, totals.take(route.parent_slot, axis=0) - held)

    def borrowing(self, node: int) -> bool:
        """Uses more than its guarantee on some resource (Kueue: a borrower)."""
        return bool(np.any(self.borrowed(node) > EPSILON))

    def borrowed(self, node: int) -> Vector:
        """What the node uses above its guarantee, on the resources its quota bounds."""
        over = np.where(self.tree.bounded[node], self.used[node] - self.tree.guaranteed[node], 0.0)
        result: Vector = np.maximum(over, 0.0)
        return result

    def within_guarantee(self, node: int, amount: Vector) -> bool:
        wanted = (amount > EPSILON) & self.tree.bounded[node]
        after = self.used[node][wanted] + amount[wanted]
        return bool(np.all(after <= self.tree.guaranteed[node][wanted] + EPSILON))

    def admit(self, node: int, amount: Vector, *, use_runtime: bool) -> QuotaVerdict:
        """Whether ``amount`` more may run under quota node ``node`` (see module docstring).

        The checks of ``admit_exact``, in its order, on the path's few numbers as Python
        floats. Ceilings and runtime quota compare the very numbers the loop compares, so
        they agree exactly. The sibling check adds the kept siblings' total (``others``),
        whose rounding differs from the loop's sum: it decides only when the margin is clear
        (``SIBLING_TOLERANCE``) and leaves anything closer to the loop. Reasons are worded
        by the same helpers.
        """
        route = self._routes.get(node) or self._route(node)
        width = len(amount)
        request = amount.tolist()
        wanted = [dim for dim in range(width) if request[dim] > EPSILON]
        used = self.used.take(route.path, axis=0).ravel().tolist()
        others = self.others.take(route.path, axis=0).ravel().tolist()
        ceiling, kept = route.ceiling_limit, route.kept
        clear, over = route.pool_clear, route.pool_over
        for step in range(len(route.steps)):
            base = step * width
            for dim in wanted:
                if used[base + dim] + request[dim] > ceiling[base + dim]:
                    index = route.steps[step]
                    return QuotaVerdict(False, self._at_limit(index, dim, self.tree.ceiling, "max"))
            for dim in wanted:
                at = base + dim
                after = used[at] + request[dim]
                held = others[at] + (after if after >= kept[at] else kept[at])
                if held <= clear[at]:
                    continue
                if held <= over[at]:
                    return self.admit_exact(node, amount, use_runtime=use_runtime)
                index = route.steps[step]
                parent = route.parents[step]
                if parent is None:
                    return QuotaVerdict(False, self._at_limit(index, dim, self.tree.pool, "pool"))
                return QuotaVerdict(False, self._pool_reason(index, parent, dim, after))
        if use_runtime:
            limit = self._runtime_limits.get(node)
            if limit is None:
                limit = self._runtime_limits[node] = (
                    self.runtime_limit.take(route.path, axis=0).ravel().tolist()
                )
            for at in range(len(used)):
                step, dim = divmod(at, width)
                if request[dim] > EPSILON and used[at] + request[dim] > limit[at]:
                    reason = self._runtime_reason(route.steps[step], dim)
                    return QuotaVerdict(False, reason, soft=True)
        return _ADMITTED

    def _route(self, node: int) -> QuotaRoute:
        route = self.tree.route(node)
        kept = self._kept_matrix
        if kept is not self.tree.kept:
            path_kept = kept[route.path].copy()
            path_kept[-1] = 0.0
            route = replace(
                route,
                kept=path_kept.ravel().tolist(),
                children_kept=kept[route.children],
            )
        self._routes[node] = route
        return route

    def admit_exact(self, node: int, amount: Vector, *, use_runtime: bool) -> QuotaVerdict:
        """The reference for ``admit``: every step of the path in turn, each sibling summed.

        ``admit`` falls back to it when its sibling sums are too close to a pool to decide,
        and the tests compare the two on random trees."""
        tree = self.tree
        wanted = amount > EPSILON
        for step in tree.paths[node]:
            after = self.used[step] + amount
            over = wanted & (after > tree.ceiling[step] + EPSILON)
            if over.any():
                dim = int(np.flatnonzero(over)[0])
                return QuotaVerdict(False, self._at_limit(step, dim, tree.ceiling, "max"))
            parent = tree.parent[step]
            if parent is None:
                over = wanted & (after > tree.pool[step] + EPSILON)
                if over.any():
                    dim = int(np.flatnonzero(over)[0])
                    return QuotaVerdict(False, self._at_limit(step, dim, tree.pool, "pool"))
                continue
            siblings = tree.children[parent]
            held = np.zeros_like(amount)
            for sibling in siblings:
                usage = after if sibling == step else self.used[sibling]
                held += np.maximum(usage, self._kept(sibling))
            over = wanted & (held > tree.pool[parent] + EPSILON)
            if over.any():
                dim = int(np.flatnonzero(over)[0])
                reason = self._pool_reason(step, parent, dim, float(after[dim]))
                return QuotaVerdict(False, reason)
        if use_runtime:
            for step in tree.paths[node]:
                after = self.used[step] + amount
                above_guarantee = after > tree.guaranteed[step] + EPSILON
                over = (
                    wanted
                    & tree.bounded[step]
                    & above_guarantee
                    & (after > self.runtime[step] + EPSILON)
                )
                if over.any():
                    dim = int(np.flatnonzero(over)[0])
                    return QuotaVerdict(False, self._runtime_reason(step, dim), soft=True)
        return _ADMITTED

    def _at_limit(self, node: int, dim: int, limit: Matrix, what: str) -> str:
        name = self.tree.space.names[dim]
        used = float(self.used[node][dim])
        return (
            f"quota {self.tree.names[node]} at {what} for {name} "
            f"({format_quantity(name, used)}/{format_quantity(name, float(limit[node][dim]))})"
        )

    def _pool_reason(self, step: int, parent: int, dim: int, after: float) -> str:
        """Why ``step`` may not take ``dim`` from ``parent``'s pool: its guarantee is lent
        out, or it would borrow what its siblings use or keep."""
        tree = self.tree
        siblings = tree.children[parent]
        name = tree.space.names[dim]
        users = [
            tree.names[s]
            for s in siblings
            if s != step and self.used[s][dim] > tree.guaranteed[s][dim] + EPSILON
        ]
        if after <= tree.guaranteed[step][dim] + EPSILON:
            return (
                f"quota {tree.names[step]}'s guaranteed {name} is lent to "
                f"{', '.join(users) or 'its siblings'}: waiting for it to be reclaimed"
            )
        keepers = [tree.names[s] for s in siblings if s != step and self._kept(s)[dim] > EPSILON]
        holders = ", ".join(sorted(set(users + keepers))) or "its siblings"
        return (
            f"quota {tree.names[step]} cannot borrow more {name}: "
            f"{tree.names[parent]}'s pool is in use or kept by {holders}"
        )

    def _runtime_reason(self, step: int, dim: int) -> str:
        """Memoised by the numbers it shows: a queue refused again and again at its runtime
        quota, with nothing charged in between, gets the same words without formatting."""
        used = float(self.used[step][dim])
        runtime = float(self.runtime[step][dim])
        key = (step, dim, used, runtime)
        reason = self._runtime_reasons.get(key)
        if reason is None:
            name = self.tree.space.names[dim]
            reason = self._runtime_reasons[key] = (
                f"quota {self.tree.names[step]} is at its runtime quota for {name} "
                f"({format_quantity(name, used)}/{format_quantity(name, runtime)}): spare quota "
                "is shared with its siblings by weight"
            )
        return reason

    def compute_runtime(self, demand: Matrix) -> None:
        """Koordinator's runtime quota from ``demand`` (usage + queued requests per node)."""
        tree = self.tree
        wanted = np.minimum(demand, tree.ceiling)
        for node in range(len(tree)):
            if tree.parent[node] is None:
                self.runtime[node] = np.minimum(tree.pool[node], np.maximum(wanted[node], 0.0))
        for node in range(len(tree)):
            children = tree.children[node]
            if not children:
                continue
            self.runtime[children] = _water_fill(
                self.runtime[node],
                wanted[children],
                tree.guaranteed[children],
                tree.weight[children],
            )
        self.runtime_limit = np.where(
            tree.bounded,
            np.maximum(tree.guaranteed + EPSILON, self.runtime + EPSILON),
            np.inf,
        )
        self._runtime_limits.clear()

    def report(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        space = self.tree.space
        usage = {name: space.as_dict(self.used[i]) for i, name in enumerate(self.tree.names)}
        runtime = {
            name: {
                space.names[d]: float(self.runtime[i][d])
                for d in range(len(space))
                if np.isfinite(self.runtime[i][d]) and self.tree.pool[i][d] != np.inf
            }
            for i, name in enumerate(self.tree.names)
        }
        return usage, runtime


def _water_fill(available: Vector, wanted: Matrix, guaranteed: Matrix, weight: Vector) -> Matrix:
    """Split ``available`` between children: guarantees first, then spare by weight."""
    given = np.minimum(wanted, guaranteed)
    result = given.copy()
    for dim in range(available.shape[0]):
        spare = available[dim] - given[:, dim].sum()
        if not np.isfinite(available[dim]):
            result[:, dim] = wanted[:, dim]
            continue
        hungry = wanted[:, dim] > result[:, dim] + EPSILON
        while spare > EPSILON and hungry.any():
            share = spare * weight * hungry / (weight * hungry).sum()
            grant = np.minimum(share, wanted[:, dim] - result[:, dim])
            result[:, dim] += grant
            spare -= grant.sum()
            hungry = wanted[:, dim] > result[:, dim] + EPSILON
    return result


def _vector(space: ResourceSpace, values: Mapping[str, float], default: float) -> Vector:
    vector = np.full(len(space), default)
    for name, amount in values.items():
        if name in space.index:
            vector[space.index[name]] = amount
    return vector
