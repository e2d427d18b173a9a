"""The one JSON form of an assignment: what a run stores, the API shows and the service reads.

``{"cluster": NAME, "placements": [{"task", "replica", "node", "gpus": [device, ...],
"shares": [[device, share], ...], "gpu_memory": bytes}, ...]}``, written by
``AssignmentRecord.marshal`` (``Assignment.to_json`` in the engine) and read by
``AssignmentRecord.unmarshal`` (``Assignment.from_json`` rebuilds the engine's object on a
node table). ``unmarshal`` accepts what older rows lack (``cluster``, ``shares``,
``gpu_memory``), so a database written before any of them loads unchanged.

Plain Python only: the CLI and the dashboard read assignments without loading the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PlacementRecord:
    """Where one replica of one task runs, as stored."""

    task: str
    replica: int
    node: str
    gpus: tuple[int, ...] = ()
    """The devices it holds, whole or in part."""
    shares: tuple[tuple[int, float], ...] = ()
    """The share of each of those devices it holds (1.0: the whole device)."""
    gpu_memory: float = 0.0
    """GPU memory it holds, in bytes, spread evenly over its devices (0: none asked for)."""

    def marshal(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "replica": self.replica,
            "node": self.node,
            "gpus": list(self.gpus),
            "shares": [list(share) for share in self.shares],
            "gpu_memory": self.gpu_memory,
        }

    @classmethod
    def unmarshal(cls, data: Mapping[str, Any]) -> PlacementRecord:
        return cls(
            task=str(data.get("task", "")),
            replica=int(data.get("replica", 0)),
            node=str(data.get("node", "")),
            gpus=tuple(int(device) for device in data.get("gpus") or ()),
            shares=tuple((int(device), float(share)) for device, share in data.get("shares") or ()),
            gpu_memory=float(data.get("gpu_memory", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class AssignmentRecord:
    """A whole job placed on one cluster, as stored on its run."""

    cluster: str
    placements: tuple[PlacementRecord, ...] = ()

    @property
    def nodes(self) -> list[str]:
        """Each node it runs on, once, in placement order."""
        return list(dict.fromkeys(placement.node for placement in self.placements))

    def marshal(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "placements": [placement.marshal() for placement in self.placements],
        }

    @classmethod
    def unmarshal(cls, data: Mapping[str, Any] | None) -> AssignmentRecord:
        """The record of stored JSON; an empty one for a run that holds nothing yet."""
        data = data or {}
        return cls(
            cluster=str(data.get("cluster", "")),
            placements=tuple(
                PlacementRecord.unmarshal(item) for item in data.get("placements") or ()
            ),
        )
