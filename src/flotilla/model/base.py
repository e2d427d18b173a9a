"""Shared pydantic building blocks: strict models and resource lists."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from flotilla.model.quantity import parse_quantity


class Strict(BaseModel):
    """Base of every spec: unknown fields are errors, specs are immutable once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Quantity = Annotated[float, BeforeValidator(parse_quantity)]
"""A non-negative resource amount; strings use Kubernetes quantity syntax."""

ResourceList = dict[str, Quantity]
"""Resource name to amount in base units (cores, bytes, counts)."""

Name = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
"""Names of clusters, nodes, queues, quotas, jobs and tasks."""

Labels = dict[str, str]
