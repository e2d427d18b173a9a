"""Read a fleet file, and combine one with a scenario for the simulator."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flotilla.model.errors import SpecError, from_pydantic
from flotilla.model.fleet import Fleet
from flotilla.model.loader import check_fleet_references, parse_document, scenario_from_data
from flotilla.model.scenario import Scenario

FLEET_FIELDS = ("settings", "priority_classes", "clusters", "quotas", "queues")
"""The scenario fields a fleet file supplies."""


class FleetError(SpecError):
    """An invalid fleet file: one ``path: problem`` line per problem."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        super().__init__(problems, source)
        where = f"{source}: " if source else ""
        self.args = (where + "invalid fleet\n  " + "\n  ".join(self.problems),)


def load_fleet(path: str | Path) -> Fleet:
    """Load and fully validate a fleet file; raise ``FleetError`` naming every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise FleetError([f"cannot read file: {error.strerror}"], str(path)) from None
    try:
        data = parse_document(text, str(path))
    except SpecError as error:
        raise FleetError(error.problems, str(path)) from None
    return fleet_from_data(data, str(path))


def fleet_from_data(data: Any, source: str | None = None) -> Fleet:
    if not isinstance(data, dict):
        raise FleetError(["(top level): a fleet is a mapping of fields"], source)
    try:
        fleet = Fleet.model_validate(data)
    except ValidationError as error:
        raise FleetError(
            [_joined(line) for line in from_pydantic(error).problems], source
        ) from None
    problems = check_fleet_references(
        fleet.clusters, fleet.queues, fleet.priority_classes, fleet.quotas
    )
    if problems:
        raise FleetError(problems, source)
    return fleet


_NESTED = re.compile(r"^(\S+): ((?:settings|cost)\.\S+): ")


def _joined(line: str) -> str:
    """``clusters[1]: settings.token: …`` (a model check's message) → ``clusters[1].settings
    .token: …``, one path as every other problem has."""
    return _NESTED.sub(r"\1.\2: ", line)


def scenario_with_fleet(
    data: Any, fleet: Fleet, source: str | None = None, fleet_source: str | None = None
) -> Scenario:
    """The scenario ``data`` with its fleet part replaced by ``fleet``'s (for ``flotilla
    simulate scenario.yaml --fleet fleet.yaml``).

    The scenario file may then leave its fleet part out; what it gives is replaced, never
    merged. The clusters' backend ``settings`` are dropped (the simulator simulates every
    cluster; ``backend`` stays as information) and each cluster must list its nodes.
    """
    if not isinstance(data, dict):
        raise SpecError(["(top level): a scenario is a mapping of fields"], source)
    problems = [
        f"clusters[{index}].nodes: a simulated cluster needs its nodes (a service cluster "
        "may leave them to its backend)"
        for index, cluster in enumerate(fleet.clusters)
        if not cluster.nodes
    ]
    if problems:
        raise FleetError(problems, fleet_source)
    fleet_part = fleet.model_dump(mode="json", include=set(FLEET_FIELDS), exclude_unset=False)
    for cluster, declared in zip(fleet_part["clusters"], fleet.clusters, strict=True):
        cluster.pop("settings", None)
        cluster["labels"] = fleet.labels_of(declared)
    merged = {key: value for key, value in data.items() if key not in FLEET_FIELDS}
    merged.update(fleet_part)
    return scenario_from_data(merged, source)
