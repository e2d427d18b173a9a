"""Kubernetes resource quantities (``500m``, ``4Gi``, ``1e3``) as plain floats.

Every resource is held internally as a float in its base unit: cores for ``cpu``,
bytes for ``memory`` and ``gpu_memory``, a count for everything else. Parsing is
strict: a quantity that Kubernetes would reject is rejected here too.
"""

from __future__ import annotations

import math
import re

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
_PATTERN = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)

GIB = float(2**30)

MAX_QUANTITY = float(2**63)
"""The largest amount of one resource (``8Ei`` bytes; 9.2e18 cores or GPUs): sums over
thousands of nodes or replicas stay finite, and every store can hold it."""


def parse_quantity(value: object) -> float:
    """Return the quantity as a float in base units; raise ``ValueError`` naming the problem."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number or a quantity string, not {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is not a quantity (examples: 2, 0.5, 500m, 4Gi, 1G)")
        digits, suffix = match.group(1), match.group(2) or ""
        scale = _BINARY.get(suffix) or _DECIMAL[suffix]
        number = float(digits) * scale
    else:
        raise ValueError(f"must be a number or a quantity string, not {type(value).__name__}")
    if not math.isfinite(number):
        raise ValueError("must be finite")
    if number < 0:
        raise ValueError("must be >= 0")
    if number > MAX_QUANTITY:
        raise ValueError(f"must be at most {MAX_QUANTITY:.4g} (8Ei)")
    return number


def format_quantity(name: str, value: float) -> str:
    """Render a base-unit value the way a person reads it (``64Gi``, ``0.5``, ``8``)."""
    if name in ("memory", "gpu_memory") or name.endswith("memory"):
        for suffix, scale in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= scale:
                return f"{_trim(value / scale)}{suffix}"
        return _trim(value)
    return _trim(value)


def _trim(value: float) -> str:
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")
