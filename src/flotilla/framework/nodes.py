"""Node state of one cluster as numpy arrays, so filters and scores run vectorised.

A ``NodeTable`` holds capacity and allocation per node and resource, plus each node's GPU
devices (free share and free memory per device). It is the only mutable scheduling state:
``allocate``/``release`` change it, ``copy`` makes the cheap snapshot a scheduling round works on.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flotilla.framework import versions
from flotilla.framework.resources import ResourceSpace, Vector
from flotilla.framework.versions import ContentVersions, Version
from flotilla.model.cluster import TaintEffect
from flotilla.model.node_info import NodeInfo

__all__ = ["HARD_EFFECTS", "NodeTable"]

Mask = npt.NDArray[np.bool_]

HARD_EFFECTS = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)

_CHANGE_LOG_LIMIT = 4096
"""The change log is cleared past this many entries (plus four per node): readers behind it
rebuild from the whole table, which costs about what replaying that many changes would."""


@dataclass(frozen=True)
class GpuAllocation:
    """The share of each device a replica holds: ``{device id: share}``."""

    shares: tuple[tuple[int, float], ...]
    memory: float = 0.0

    @property
    def device_ids(self) -> list[int]:
        return [device for device, _ in self.shares]


class NodeTable:
    """Capacity, allocation and GPU devices of a cluster's nodes, one row per node."""

    def __init__(self, space: ResourceSpace, nodes: Sequence[NodeInfo]) -> None:
        self.space = space
        self.nodes = tuple(nodes)
        self.names = [node.name for node in nodes]
        self.row = {name: i for i, name in enumerate(self.names)}
        self.capacity = np.array(
            [space.vector(node.capacity) for node in nodes], dtype=np.float64
        ).reshape(len(nodes), len(space))
        self.capacity.flags.writeable = False
        self.inverse_capacity = np.divide(
            1.0, self.capacity, out=np.zeros_like(self.capacity), where=self.capacity > 0
        )
        self.inverse_capacity.flags.writeable = False
        self.allocated = np.zeros_like(self.capacity)
        self.free = self.capacity.copy()
        """Capacity minus allocation, kept up to date by ``allocate``/``release``."""
        self.everywhere = np.ones(len(nodes), dtype=bool)
        """A shared all-true mask: filters with nothing to say return it (never modify it)."""
        self.everywhere.flags.writeable = False
        width = max((node.gpu_count for node in nodes), default=0)
        # Per device free share (1.0 = idle); padding columns of absent devices stay at 0.
        self.device_free = np.zeros((len(nodes), width))
        self.device_memory_free = np.zeros((len(nodes), width))
        # Topology: the NUMA node and PCIe switch of each device (-1 for absent devices).
        self.numa_block = np.full((len(nodes), width), -1, dtype=np.int64)
        self.pcie_block = np.full((len(nodes), width), -1, dtype=np.int64)
        for i, node in enumerate(nodes):
            self.device_free[i, : node.gpu_count] = 1.0
            memory = node.gpu_memory if node.gpu_memory is not None else np.inf
            self.device_memory_free[i, : node.gpu_count] = memory
            if node.gpu_count:
                ids = np.arange(node.gpu_count)
                self.numa_block[i, : node.gpu_count] = ids // (node.gpu_count // node.numa_nodes)
                switches = node.pcie_switches or node.numa_nodes
                self.pcie_block[i, : node.gpu_count] = ids // (node.gpu_count // switches)
        self.numa_block.flags.writeable = False
        self.pcie_block.flags.writeable = False
        self._static_masks: dict[Hashable, Mask] = {}
        """``static_mask``'s masks: shared by every copy of the table (labels and taints never
        change), so each round's copy does not start over."""
        self.hard_taints = [
            tuple(t for t in node.taints if t.effect in HARD_EFFECTS) for node in nodes
        ]
        self.any_hard_taints = any(self.hard_taints)
        self._versions = ContentVersions()
        """Names this table's content; shared by its copies (same static part)."""
        self._version: Version | None = None
        self._row_ids: npt.NDArray[np.int64] | None = None
        """Per row, the id of its state, when the table is content-addressed (small)."""
        if len(nodes) < versions.CONTENT_ADDRESSED_NODES:
            self._row_ids = np.array(
                [self._versions.row_id(self._row_state(row)) for row in range(len(nodes))],
                dtype=np.int64,
            )
        else:
            self._version = ContentVersions.fresh()
        self._start_change_log()

    def _start_change_log(self) -> None:
        """An empty change log (a new table or a fresh copy)."""
        self.changed_rows: list[int] = []
        """Rows touched by ``allocate``/``release``, oldest first, since ``changes_dropped``
        entries were dropped: what the best-node index re-evaluates between placements."""
        self.changes_dropped = 0
        """How many changes were dropped from the front of the log (bounding its memory);
        a reader that had not caught up with them must start over."""

    @property
    def version(self) -> Version:
        """Names the table's whole content (nodes and allocation): equal versions imply
        equal content, across copies, rounds and cycles, so what was computed from a table's
        content alone may be remembered under its version (``scheduler.failures``). How
        versions are made is in ``framework.versions``."""
        version = self._version
        if version is None:
            assert self._row_ids is not None
            version = self._version = self._versions.content_version(self._row_ids.tobytes())
        return version

    @property
    def change_count(self) -> int:
        """Changes since the table (or this copy) was made: a position in the change log."""
        return self.changes_dropped + len(self.changed_rows)

    def _log_change(self, row: int) -> None:
        changed = self.changed_rows
        changed.append(row)
        if len(changed) > _CHANGE_LOG_LIMIT + 4 * len(self.names):
            self.changes_dropped += len(changed)
            changed.clear()

    def __len__(self) -> int:
        return len(self.names)

    def copy(self) -> NodeTable:
        """A snapshot sharing the static parts; allocations are copied, the version kept
        (same content) until either table changes."""
        clone = object.__new__(NodeTable)
        clone.__dict__.update(self.__dict__)
        clone.allocated = self.allocated.copy()
        clone.free = self.free.copy()
        clone.device_free = self.device_free.copy()
        clone.device_memory_free = self.device_memory_free.copy()
        if self._row_ids is not None:
            clone._row_ids = self._row_ids.copy()
        clone._start_change_log()
        return clone

    def static_mask(self, key: Hashable, build: Callable[[], Mask]) -> Mask:
        """A mask computed only from what never changes in the table (``nodes``: labels,
        taints), built once by ``build`` and kept for the table and all its copies. ``key``
        names what it was computed from; a caller starts it with a tag of its own
        (``("tolerations", ...)``) so that two callers never share a key."""
        mask = self._static_masks.get(key)
        if mask is None:
            mask = build()
            mask.flags.writeable = False
            self._static_masks[key] = mask
        return mask

    def label_mask(self, key: str, value: str) -> Mask:
        """Nodes whose label ``key`` equals ``value``."""
        return self.static_mask(
            ("label", key, value),
            lambda: np.array([node.labels.get(key) == value for node in self.nodes], dtype=bool),
        )

    def _row_state(self, row: int) -> bytes:
        """Everything ``allocate``/``release`` may change in ``row``, as bytes."""
        state: bytes = (
            self.allocated[row].tobytes()
            + self.free[row].tobytes()
            + self.device_free[row].tobytes()
            + self.device_memory_free[row].tobytes()
        )
        return state

    def allocate(self, row: int, request: Vector, gpus: GpuAllocation | None) -> None:
        self._log_change(row)
        self.allocated[row] += request
        self.free[row] -= request
        if gpus is not None:
            for device, share in gpus.shares:
                self.device_free[row, device] -= share
                self.device_memory_free[row, device] -= gpus.memory / len(gpus.shares)
        self._changed(row)

    def release(self, row: int, request: Vector, gpus: GpuAllocation | None) -> None:
        self._log_change(row)
        self.allocated[row] -= request
        if gpus is not None:
            for device, share in gpus.shares:
                self.device_free[row, device] += share
                self.device_memory_free[row, device] += gpus.memory / len(gpus.shares)
        # Keep accumulated float error from turning into phantom allocations.
        np.maximum(self.allocated[row], 0.0, out=self.allocated[row])
        self.free[row] = self.capacity[row] - self.allocated[row]
        self._changed(row)

    def _changed(self, row: int) -> None:
        """Name the content after a change to ``row`` (``framework.versions``): a small
        table re-interns the row (its version is found when asked), a large one takes a
        fresh version."""
        row_ids = self._row_ids
        if row_ids is None:
            self._version = ContentVersions.fresh()
            return
        row_ids[row] = self._versions.row_id(self._row_state(row))
        self._version = None
