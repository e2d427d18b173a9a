"""An incremental best-node index: where the next replica of a shape goes, without a scan.

Why: without it, placing a replica runs every filter over every node and every score over
the candidates (some thirty numpy calls over thousands of rows), although between two placements
only the one or two rows that were allocated or released change. When every filter and score
of the profile is row-local (``RowLocalFilter``/``RowLocalScore`` in ``interfaces``), a
node's total score for a placement key depends on its own row alone. So the index keeps,
per node table and key, the array of those totals (``-inf`` where a filter rejects the
node) together with the position in the table's change log it is valid at; bringing it up
to date re-asks the plugins about the changed rows only, and the best node is one ``argmax``.

Exactness: ``argmax`` keeps the first of equal maxima, i.e. the lowest row, which is what the
full path's ``argmax`` over ascending candidates picks. Scores are summed in plugin order
starting from zeros with element-wise arithmetic, so every total is the same float as the full
path's. When the best total is not finite (no node passes, or a plugin returned NaN), the
caller falls back to the full path, which also explains the failure.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from flotilla.framework.interfaces import FilterInput, RowScore, RowVerdict, ScoreInput
from flotilla.framework.jobs import SchedulingJob, TaskRequest
from flotilla.framework.nodes import NodeTable
from flotilla.framework.registry import Framework

KEYS_PER_TABLE = 64
"""Placement keys remembered per node table (least recently used dropped first): each costs
one float per node."""

REBUILD_FRACTION = 8
"""Rebuild a key's array from the whole table when more than 1/8 of its rows changed since:
re-asking about that many rows one change at a time costs more than a full scan."""

MIN_NODES = 512
"""Smaller tables are scanned: a full scan costs mostly per numpy call, not per node, so on a
small table it is as fast as the index (the break-even: ``docs/performance.md``)."""

ROW_PATH_LIMIT = 24
"""Re-ask about at most this many changed rows one by one on Python floats (the plugins'
``row_filter``/``row_score``): each numpy call costs microseconds whatever its length,
a row on Python floats about one, so past a few dozen rows the vectorised path wins."""

RowEvaluator = Callable[[int], float]
"""A node's total score for one placement key (``-inf`` where a filter rejects it)."""


def placement_key(job: SchedulingJob, task: TaskRequest) -> tuple[object, ...]:
    """Everything a row-local filter or score may read of a request (the contract in
    ``interfaces.FilterPlugin``): two requests with equal keys get equal verdicts and scores
    on every node. Built from values, not from ``job.placement_key``, which is not set for
    every job and names gangs and remainders by job."""
    node_affinity = job.affinity.nodes
    return (
        task.request.tobytes(),
        task.gpu,
        task.gpu_memory,
        task.gpu_scope,
        task.share_gpu,
        job.tolerations,
        tuple(node_affinity.required.items()),
        tuple(node_affinity.preferred.items()),
        job.node_domains,
    )


class _KeyScores:
    """One key's total score per node (``-inf`` where rejected), valid at ``position``; the
    key's per-row evaluator; and the row
    ``argmax`` picks with its total (``row`` is -1 when unknown)."""

    __slots__ = ("best", "evaluate", "position", "row", "top")

    def __init__(
        self, best: npt.NDArray[np.float64], position: int, evaluate: RowEvaluator
    ) -> None:
        self.best = best
        self.position = position
        self.evaluate = evaluate
        self.row = -1
        self.top = -np.inf


def row_evaluator(framework: Framework, request: FilterInput) -> RowEvaluator:
    """The profile's verdict and total score of one node on Python floats (a row-local
    profile: every filter a ``RowLocalFilter``, every score a ``RowLocalScore``). Filters are
    asked in profile order, then the scores are summed in profile order from 0.0 like the
    vectorised path, so the total is the same float (the plugins' ``row_filter``/``row_score``
    agree bit for bit with ``filter``/``score``)."""
    verdicts: list[RowVerdict] = []
    for plugin in framework.row_filters:
        verdict = plugin.row_filter(request)
        if verdict is not None:
            verdicts.append(verdict)
    scores: list[RowScore] = []
    for scorer in framework.row_scores:
        score = scorer.row_score(request)
        if score is not None:
            scores.append(score)
    rejected = -np.inf

    def evaluate(row: int) -> float:
        for verdict in verdicts:
            if not verdict(row):
                return rejected
        total = 0.0
        for score in scores:
            total += score(row)
        return total

    return evaluate


class BestNodeIndex:
    """The best-node arrays of one node table, per placement key, for one row-local framework.

    Kept by the engine's caches per table object (``scheduler.caches``); a copy of the table
    starts without one, since a copy's change log starts afresh.
    """

    def __init__(self, framework: Framework) -> None:
        self.framework = framework
        self._keys: OrderedDict[tuple[object, ...], _KeyScores] = OrderedDict()

    def best_node(self, request: FilterInput) -> int | None:
        """The row the full path would pick for ``request``, or ``None`` when the full path
        must decide (no node passes, or a non-finite score)."""
        nodes = request.cluster.nodes
        key = placement_key(request.job, request.task)
        position = nodes.change_count
        entry = self._keys.get(key)
        if entry is None:
            evaluate = row_evaluator(self.framework, request)
            entry = _KeyScores(self._rebuild(request), position, evaluate)
            self._keys[key] = entry
            if len(self._keys) > KEYS_PER_TABLE:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(key)
            if entry.position != position:
                behind = entry.position - nodes.changes_dropped
                if behind < 0 or (position - entry.position) * REBUILD_FRACTION > len(nodes):
                    entry.best = self._rebuild(request)
                    entry.row = -1
                else:
                    changed = set(nodes.changed_rows[behind:])
                    evaluate = entry.evaluate
                    if len(changed) <= ROW_PATH_LIMIT:
                        self._update_rows(entry, evaluate, changed)
                    else:
                        rows = np.fromiter(changed, dtype=np.intp, count=len(changed))
                        self._update(request, entry.best, rows)
                        entry.row = -1
                entry.position = position
        if entry.row < 0:
            best = entry.best
            entry.row = int(best.argmax())
            entry.top = float(best[entry.row])
        # NaN and -inf both fail this test: the full path then decides.
        if entry.top > -np.inf:
            return entry.row
        return None

    @staticmethod
    def _update_rows(entry: _KeyScores, evaluate: RowEvaluator, changed: set[int]) -> None:
        """Re-evaluate ``changed`` rows one by one and keep ``argmax``'s answer without a
        scan when it can be told from them: ``argmax`` picks the lowest row of the highest
        total, so a changed row takes over when it beats the best total or equals it at a
        lower row; the best row itself keeps its place when its total did not drop (every
        other row is at most its old total, and none equal to it lies below it). Otherwise
        (its total dropped, or a NaN appeared) the next query runs ``argmax`` again."""
        scores = entry.best
        row, top = entry.row, entry.top
        if row >= 0 and row in changed:
            value = evaluate(row)
            scores[row] = value
            if not value >= top:
                row = -1
            top = value
        for changed_row in changed:
            if changed_row == entry.row:
                continue
            value = evaluate(changed_row)
            scores[changed_row] = value
            if row < 0:
                continue
            if value > top or (value == top and changed_row < row):
                row, top = changed_row, value
            elif value != value:
                row = -1
        entry.row, entry.top = row, top

    def _scores(
        self, request: FilterInput, candidates: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        """Total score of ``candidates``, summed in plugin order from zeros like the full path."""
        return total_scores(self.framework, request, candidates)

    def _rebuild(self, request: FilterInput) -> npt.NDArray[np.float64]:
        """Every node's total score from the whole table."""
        nodes = request.cluster.nodes
        mask = None
        for plugin in self.framework.filters:
            plugin_mask = plugin.filter(request)
            if plugin_mask is nodes.everywhere:
                continue
            mask = plugin_mask if mask is None else mask & plugin_mask
        best = np.full(len(nodes), -np.inf)
        candidates = np.arange(len(nodes), dtype=np.intp) if mask is None else np.flatnonzero(mask)
        if len(candidates):
            best[candidates] = self._scores(request, candidates)
        return best

    def _update(
        self, request: FilterInput, best: npt.NDArray[np.float64], rows: npt.NDArray[np.intp]
    ) -> None:
        """Re-ask the plugins about ``rows`` (changed since ``best`` was right)."""
        nodes: NodeTable = request.cluster.nodes
        subset = FilterInput(
            job=request.job,
            task=request.task,
            cluster=request.cluster,
            cycle=request.cycle,
            rows=rows,
        )
        mask = None
        for plugin in self.framework.filters:
            plugin_mask = plugin.filter(subset)
            if plugin_mask is nodes.everywhere:
                continue
            mask = plugin_mask if mask is None else mask & plugin_mask
        feasible = rows if mask is None else rows[mask]
        best[rows] = -np.inf
        if len(feasible):
            best[feasible] = self._scores(request, feasible)


def total_scores(
    framework: Framework, request: FilterInput, candidates: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    """The profile's total score of ``candidates``: every Score plugin's answer added in plugin
    order, starting from zeros. The index and the full scan share it, so their floats agree
    bit for bit."""
    score_input = ScoreInput(
        job=request.job,
        task=request.task,
        cluster=request.cluster,
        candidates=candidates,
        cycle=request.cycle,
    )
    total = np.zeros(len(candidates))
    for scorer in framework.scores:
        scores = scorer.score(score_input)
        if scores is not None:
            total += scores
    return total
