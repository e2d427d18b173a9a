"""Shared pydantic building blocks: strict models and resource lists."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from flotilla.model.quantity import MAX_QUANTITY, parse_quantity

MAX_SECONDS = 10 * 365 * 86400.0
"""The longest duration any spec may give (ten years): a delay, a runtime, a timeout. Every
moment a scheduler computes from one (``now + delay``) stays a date it can hold; an unbounded
one (``99999999999h``) overflowed inside the scheduling loop."""

MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6
"""A queue's or quota's weight divides its share: one near 0 or near ``1e308`` makes shares
infinite or zero, which orders nothing."""

MAX_COUNT = 1_000_000
"""The largest count a spec may give where no server limit applies (GPUs of a node, gang
members, array parallelism): far beyond any real machine, far below what breaks a store."""

MAX_PRIORITY = 1_000_000_000
"""The largest ``|priority|`` of a priority class or threshold (a job's is a server limit)."""


def _at_most_max_seconds(value: float) -> float:
    if value > MAX_SECONDS:
        raise ValueError(f"must be at most {MAX_SECONDS:.0f} seconds (ten years)")
    return value


def _weight(value: float) -> float:
    if value < MIN_WEIGHT:
        raise ValueError(f"must be at least {MIN_WEIGHT:g}")
    return value


class Strict(BaseModel):
    """Base of every spec: unknown fields are errors, specs are immutable once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


QUANTITY_SCHEMA = {
    "anyOf": [
        {"type": "number", "minimum": 0, "maximum": MAX_QUANTITY},
        {
            "type": "string",
            "pattern": r"^[0-9]{1,6}(\.[0-9]{1,6})?(Ki|Mi|Gi|Ti|[mkMGT])?$",
            "description": "A Kubernetes quantity (500m, 4Gi, 1G); larger ones than this "
            "pattern allows are taken up to 8Ei.",
        },
    ]
}
"""What the API's document says of an amount: every request it allows is accepted."""

Quantity = Annotated[float, BeforeValidator(parse_quantity), WithJsonSchema(QUANTITY_SCHEMA)]
"""A non-negative resource amount; strings use Kubernetes quantity syntax."""

Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS), AfterValidator(_at_most_max_seconds)]
"""A non-negative number of seconds, at most ``MAX_SECONDS``."""

Weight = Annotated[float, Field(gt=0, le=MAX_WEIGHT), AfterValidator(_weight)]
"""A queue's or quota's weight: between ``MIN_WEIGHT`` and ``MAX_WEIGHT``."""

ResourceList = dict[str, Quantity]
"""Resource name to amount in base units (cores, bytes, counts)."""

Name = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
"""Names of clusters, nodes, queues, quotas, jobs and tasks."""

Labels = dict[str, str]
