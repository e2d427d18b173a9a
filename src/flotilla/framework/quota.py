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
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flotilla.framework.resources import EPSILON, ResourceSpace, Vector
from flotilla.model.quantity import format_quantity
from flotilla.model.queue import QuotaSpec

Matrix = npt.NDArray[np.float64]


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

    def __len__(self) -> int:
        return len(self.names)

    def _path(self, node: int) -> list[int]:
        path = [node]
        while (parent := self.parent[path[-1]]) is not None:
            path.append(parent)
        return path

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


class QuotaUsage:
    """Usage per quota node during one run, with admission checks and runtime quota."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self.used = np.zeros_like(tree.minimum)
        self.runtime = np.full_like(tree.minimum, np.inf)

    def add(self, node: int, amount: Vector) -> None:
        for step in self.tree.paths[node]:
            self.used[step] += amount

    def remove(self, node: int, amount: Vector) -> None:
        for step in self.tree.paths[node]:
            self.used[step] -= amount
        np.maximum(self.used, 0.0, out=self.used)

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
        """Whether ``amount`` more may run under quota node ``node`` (see module docstring)."""
        tree = self.tree
        wanted = amount > EPSILON
        for step in tree.paths[node]:
            after = self.used[step] + amount
            over = wanted & (after > tree.ceiling[step] + EPSILON)
            if over.any():
                reason = self._at_limit(step, over, tree.ceiling[step], "max")
                return QuotaVerdict(False, reason)
            parent = tree.parent[step]
            if parent is None:
                over = wanted & (after > tree.pool[step] + EPSILON)
                if over.any():
                    reason = self._at_limit(step, over, tree.pool[step], "pool")
                    return QuotaVerdict(False, reason)
                continue
            siblings = tree.children[parent]
            held = np.zeros_like(amount)
            for sibling in siblings:
                usage = after if sibling == step else self.used[sibling]
                held += np.maximum(usage, tree.kept[sibling])
            over = wanted & (held > tree.pool[parent] + EPSILON)
            if over.any():
                dim = int(np.flatnonzero(over)[0])
                name = tree.space.names[dim]
                users = [
                    tree.names[s]
                    for s in siblings
                    if s != step and self.used[s][dim] > tree.guaranteed[s][dim] + EPSILON
                ]
                keepers = [
                    tree.names[s] for s in siblings if s != step and tree.kept[s][dim] > EPSILON
                ]
                if after[dim] <= tree.guaranteed[step][dim] + EPSILON:
                    reason = (
                        f"quota {tree.names[step]}'s guaranteed {name} is lent to "
                        f"{', '.join(users) or 'its siblings'}: waiting for it to be reclaimed"
                    )
                else:
                    holders = ", ".join(sorted(set(users + keepers))) or "its siblings"
                    reason = (
                        f"quota {tree.names[step]} cannot borrow more {name}: "
                        f"{tree.names[parent]}'s pool is in use or kept by {holders}"
                    )
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
                    name = tree.space.names[dim]
                    return QuotaVerdict(
                        False,
                        f"quota {tree.names[step]} is at its runtime quota for {name} "
                        f"({format_quantity(name, float(self.used[step][dim]))}/"
                        f"{format_quantity(name, float(self.runtime[step][dim]))}): spare quota "
                        "is shared with its siblings by weight",
                        soft=True,
                    )
        return QuotaVerdict(True)

    def _at_limit(self, node: int, over: npt.NDArray[np.bool_], limit: Vector, what: str) -> str:
        dim = int(np.flatnonzero(over)[0])
        name = self.tree.space.names[dim]
        used = float(self.used[node][dim])
        return (
            f"quota {self.tree.names[node]} at {what} for {name} "
            f"({format_quantity(name, used)}/{format_quantity(name, float(limit[dim]))})"
        )

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
