"""The fleet file: the clusters Flotilla drives, and its queues, quotas and settings.

The same schema as a scenario's fleet part (``settings``, ``priority_classes``, ``clusters``,
``quotas``, ``queues``; see ``../shared/spec/scenario.md``) plus, per cluster, ``backend`` (an
entry-point name of the group ``flotilla.backends``) and ``settings`` (that backend's keyword
settings). A service cluster's nodes are optional: they come from its backend's
``inventory()``. The simulator reads the same file (``flotilla simulate --fleet``), where
nodes are required since nothing reports them.

Any setting value may be a secret reference instead of the value itself: a mapping whose
only key is ``env`` (an environment variable's name) or ``file`` (a path; the content with
its trailing newline removed). References are what is stored and shown; values are resolved
in each process that builds a backend, and never stored, logged or printed.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue, model_validator

from flotilla.model.base import Labels, Name, Seconds, Strict
from flotilla.model.cluster import (
    SIMULATED_LABEL,
    GpuSharing,
    NodeGroup,
    check_costs,
    check_topology,
)
from flotilla.model.queue import PriorityClass, QueueSpec, QuotaSpec
from flotilla.model.scenario import Settings

SECRET_KEYS = ("env", "file")

SECRET_WORDS = ("token", "password", "secret", "credential")
"""A setting whose name holds one of these is a secret: refused unless given by reference."""


def secret_reference(value: Any) -> tuple[str, str] | None:
    """``("env", "NAME")`` or ``("file", "PATH")`` when ``value`` is a secret reference."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, target),) = value.items()
        if kind in SECRET_KEYS:
            return str(kind), target if isinstance(target, str) else ""
    return None


class FleetCluster(Strict):
    """One cluster of the fleet, run by the backend ``backend`` configured by ``settings``."""

    name: Name
    backend: str = Field(default="sim", min_length=1)
    settings: dict[str, JsonValue] = {}
    """Keyword settings of the backend's factory (``factory(cluster=name, **settings)``)."""
    labels: Labels = {}
    cost: dict[str, float] = {}
    gpu_sharing: GpuSharing = GpuSharing.SHARED
    topology: list[str] = []
    """Node-label keys naming the cluster's network levels, widest first."""
    """How fractions of different jobs may share a device (``plugins/devices.py``)."""
    startup_delay: Seconds = 0
    """Simulator only: seconds from dispatch to running."""
    fail_at: Seconds | None = None
    """Simulator only: when the cluster fails."""
    nodes: list[NodeGroup] = []
    """Optional for a service cluster (its backend reports them); required to simulate."""

    @model_validator(mode="after")
    def _check(self) -> FleetCluster:
        check_topology(self.topology)
        check_costs(self.cost)
        if "cluster" in self.settings:
            raise ValueError("settings.cluster: is the cluster's name; do not set it")
        for key, value in self.settings.items():
            reference = secret_reference(value)
            if reference is None and value and any(w in key.lower() for w in SECRET_WORDS):
                raise ValueError(
                    f"settings.{key}: a secret is given by reference, {{env: NAME}} or "
                    "{file: PATH}, never inline (it would be stored and shown)"
                )
            if reference is not None and not reference[1]:
                raise ValueError(
                    f"settings.{key}: a secret reference {{{reference[0]}: ...}} needs a "
                    "non-empty string"
                )
        return self

    def has_secrets(self) -> bool:
        return any(secret_reference(value) for value in self.settings.values())


class Fleet(Strict):
    """A fleet file. ``name`` and ``description`` are free text."""

    name: str = "fleet"
    description: str = ""
    settings: Settings = Settings()
    priority_classes: list[PriorityClass] = []
    clusters: list[FleetCluster] = Field(min_length=1)
    quotas: list[QuotaSpec] = []
    queues: list[QueueSpec] = Field(min_length=1)

    def cluster(self, name: str) -> FleetCluster:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(name)

    def labels_of(self, cluster: FleetCluster) -> dict[str, str]:
        """The cluster's labels as the engine sees them: a ``sim`` cluster in a fleet that
        also has a real one is marked ``SIMULATED_LABEL``, so that it takes only the jobs
        that ask for it (its runs do not execute: an ordinary job sent there would
        "succeed" without running). A fleet of ``sim`` clusters alone is a test bed: they
        take every job. The file may set the label itself, either way."""
        labels = dict(cluster.labels)
        if cluster.backend == "sim" and any(c.backend != "sim" for c in self.clusters):
            labels.setdefault(SIMULATED_LABEL, "true")
        return labels
