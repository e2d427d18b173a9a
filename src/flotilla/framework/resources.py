"""The resource space: a fixed order of resource names so that requests are numpy vectors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from flotilla.model.quantity import format_quantity

Vector = npt.NDArray[np.float64]

EPSILON = 1e-9
"""Tolerance for float comparisons of resource amounts (0.1 + 0.2 must fit in 0.3)."""

CORE_RESOURCES = ("cpu", "memory", "gpu")


class ResourceSpace:
    """Maps resource names to vector positions. ``cpu``, ``memory``, ``gpu`` come first."""

    def __init__(self, names: Iterable[str]) -> None:
        extra = sorted(set(names) - set(CORE_RESOURCES))
        self.names: tuple[str, ...] = (*CORE_RESOURCES, *extra)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self._described: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, resources: Mapping[str, float]) -> Vector:
        """A read-only vector; names outside the space raise ``KeyError``."""
        vector = np.zeros(len(self.names))
        for name, amount in resources.items():
            vector[self.index[name]] = amount
        vector.flags.writeable = False
        return vector

    def zeros(self) -> Vector:
        return np.zeros(len(self.names))

    def as_dict(self, vector: Vector, *, keep_zero: bool = False) -> dict[str, float]:
        return {
            name: float(vector[i])
            for i, name in enumerate(self.names)
            if keep_zero or abs(vector[i]) > EPSILON
        }

    def describe(self, vector: Vector) -> str:
        """``cpu 4, memory 8Gi`` — for reasons shown to people (memoised: shapes repeat)."""
        key = vector.tobytes()
        text = self._described.get(key)
        if text is None:
            text = self._describe(vector)
            if len(self._described) < 10_000:
                self._described[key] = text
        return text

    def _describe(self, vector: Vector) -> str:
        parts = [
            f"{name} {format_quantity(name, float(vector[i]))}"
            for i, name in enumerate(self.names)
            if abs(vector[i]) > EPSILON
        ]
        return ", ".join(parts) or "nothing"
