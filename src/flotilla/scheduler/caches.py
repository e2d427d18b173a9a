"""The engine's speed machinery in one home: what it remembers, where, and why it is safe.

A ``SchedulingAlgorithm`` owns one ``EngineCaches`` for its profile and hands it to every
run; ``place_job`` reads it. Nothing here changes a decision — every cache answers exactly
what the plain path (``fast_paths=False``, the reference mode) computes, which the
equivalence tests check by running both.

What lives here, like the indexes Armada's ``NodeDb`` owns and documents in one place:

``shapes`` (``framework.jobs.ShapeInterner``)
    Jobs built from one spec share their request vectors and one placement-key object:
    less memory per queued job, and equal shapes compare by identity. Injected into
    ``build_job`` by whoever builds jobs for this engine (the simulator; the service's
    snapshot builder keeps its own, as its jobs outlive an algorithm).
``failures`` (``scheduler.failures.FailureCache``)
    Requests that fit nowhere, and the filters' explanation, per node-table content version
    (``framework.versions``) and placement key. Only for a row-local profile (below), where
    both depend on nothing else.
best-node indexes (``scheduler.node_index.BestNodeIndex``)
    Per node table (each round's own copy) and placement key, every node's total score, kept
    up to date from the table's change log, so a placement is an ``argmax``, not a scan.
    Held weakly: an index goes with its table.

A profile is *row-local* when every filter implements ``RowLocalFilter`` and every score
``RowLocalScore`` (``Framework.row_local``, sorted once with the other extension points);
otherwise only ``shapes`` is used and every placement scans the nodes, which keeps a
third-party plugin correct without it knowing about any of this.

Content versions are not here: they name a table's content, so each table family owns its
own (``NodeTable``, ``framework.versions``), and a version is an identity token, so versions
of different tables never collide in ``failures``.
"""

from __future__ import annotations

from threading import Lock
from weakref import WeakKeyDictionary

from flotilla.framework.jobs import ShapeInterner
from flotilla.framework.nodes import NodeTable
from flotilla.framework.registry import Framework
from flotilla.scheduler.failures import FailureCache
from flotilla.scheduler.node_index import BestNodeIndex


class EngineCaches:
    """The caches of one engine (one profile): see the module docstring.

    ``fast_paths=False`` is the reference mode: no failure cache and no best-node index, so
    every placement runs every filter over every node and explains every failure. Decisions
    and reasons are the same either way; only the time differs.

    Thread safety: the service's loop and an async round may place with one engine at once;
    the failure cache and the index registry are locked, and each index belongs to one
    table copy, which one round uses."""

    __slots__ = ("_indexes", "_lock", "failures", "fast_paths", "framework", "row_local", "shapes")

    def __init__(
        self,
        framework: Framework,
        *,
        fast_paths: bool = True,
        shapes: ShapeInterner | None = None,
    ) -> None:
        self.framework = framework
        self.fast_paths = fast_paths
        self.row_local = fast_paths and framework.row_local
        """Whether the failure cache and the best-node indexes are used."""
        self.shapes = shapes if shapes is not None else ShapeInterner()
        self.failures = FailureCache()
        self._indexes: WeakKeyDictionary[NodeTable, BestNodeIndex] = WeakKeyDictionary()
        self._lock = Lock()

    def best_node_index(self, nodes: NodeTable) -> BestNodeIndex:
        """The best-node index of this table (copy), made on first use."""
        with self._lock:
            index = self._indexes.get(nodes)
            if index is None:
                index = self._indexes[nodes] = BestNodeIndex(self.framework)
            return index

    def has_index(self, nodes: NodeTable) -> bool:
        """Whether ``nodes`` has a best-node index yet (a copy starts without one)."""
        with self._lock:
            return nodes in self._indexes
