"""One duration format for every field and flag that takes a length of time.

A number is seconds (``90``, ``2.5``); a number with a unit is ``250ms``, ``90s``, ``5m``,
``2h``, ``1d``, and such parts may follow each other (``1h30m``); a clock is Slurm's
``--time``: ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``. So
``max_runtime: 2h``, ``max_runtime: 1:30:00`` and ``retry.delay: 90`` all read as a Slurm or
Ray user would write them. Unlike Slurm, a bare number is seconds, as everywhere in
Flotilla's API.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field

from flotilla.model.base import Seconds

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_WITH_UNIT = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$")
_COMPOUND = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_CLOCK = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}(?:\.\d+)?))?$")

FORMS = "seconds, or e.g. 90s, 5m, 2h, 1d, 1:30:00, 2-00:00:00"
"""The accepted forms, as an error message names them."""


def seconds(text: str) -> float:
    """The seconds ``text`` says; ``ValueError`` naming the forms otherwise."""
    value = text.strip().lower()
    found = _WITH_UNIT.match(value)
    if found is not None:
        return float(found.group(1)) * _UNITS[found.group(2) or "s"]
    if _COMPOUND.match(value):  # 1h30m, 2m30s
        return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(value))
    clock = _CLOCK.match(value)
    if clock is not None and (":" in value or "-" in value):
        days, first, second, third = clock.groups()
        if days is None and third is None:  # MM:SS (minutes may pass 59, as in Slurm)
            hours, minutes, secs = 0.0, float(first), float(second)
            if secs < 60:
                return minutes * 60 + secs
        else:  # HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
            hours, minutes, secs = float(first), float(second or 0), float(third or 0)
            if minutes < 60 and secs < 60:
                return float(days or 0) * 86400 + hours * 3600 + minutes * 60 + secs
    raise ValueError(f"{text!r} is not a duration ({FORMS})")


def parse_duration(value: object) -> object:
    """Seconds from a number or a duration string (other values are left for pydantic to
    refuse with the field's path)."""
    if isinstance(value, str):
        return seconds(value)
    return value


Duration = Annotated[Seconds, BeforeValidator(parse_duration)]
"""Seconds, zero or more and at most ``MAX_SECONDS`` (ten years), in any form of this module."""

PositiveDuration = Annotated[Seconds, BeforeValidator(parse_duration), Field(gt=0)]
"""Seconds, more than zero and at most ``MAX_SECONDS``, in any form of this module."""
