"""Typed specs of everything Flotilla schedules, and their validation.

The bottom layer: it imports nothing else of Flotilla. Its names are imported on first use
(PEP 562): a client that needs ``format_quantity`` does not build every spec model.
"""

from typing import TYPE_CHECKING

from flotilla.model.exports import lazy_exports

if TYPE_CHECKING:
    from flotilla.model.cluster import ClusterSpec, GpuInventory, NodeGroup, Taint, TaintEffect
    from flotilla.model.errors import SpecError
    from flotilla.model.job import (
        Affinity,
        Dependency,
        DependencyCondition,
        GangMode,
        GangSpec,
        JobSpec,
        LabelAffinity,
        TaskSpec,
        Toleration,
        Topology,
        TopologyScope,
    )
    from flotilla.model.loader import load_scenario, scenario_from_data
    from flotilla.model.quantity import format_quantity, parse_quantity
    from flotilla.model.queue import Preemption, PriorityClass, QueueSpec, QuotaSpec
    from flotilla.model.retry import ArraySpec, Backoff, RetryCause, RetrySpec
    from flotilla.model.scenario import (
        Expectation,
        FairShare,
        Mode,
        Queueing,
        Scenario,
        ScenarioJobState,
        Settings,
    )

__all__ = [
    "Affinity",
    "ArraySpec",
    "Backoff",
    "ClusterSpec",
    "Dependency",
    "DependencyCondition",
    "Expectation",
    "FairShare",
    "GangMode",
    "GangSpec",
    "GpuInventory",
    "JobSpec",
    "LabelAffinity",
    "Mode",
    "NodeGroup",
    "Preemption",
    "PriorityClass",
    "QueueSpec",
    "Queueing",
    "QuotaSpec",
    "RetryCause",
    "RetrySpec",
    "Scenario",
    "ScenarioJobState",
    "Settings",
    "SpecError",
    "Taint",
    "TaintEffect",
    "TaskSpec",
    "Toleration",
    "Topology",
    "TopologyScope",
    "format_quantity",
    "load_scenario",
    "parse_quantity",
    "scenario_from_data",
]

_MODULES: dict[str, list[str]] = {
    "flotilla.model.cluster": [
        "ClusterSpec",
        "GpuInventory",
        "NodeGroup",
        "Taint",
        "TaintEffect",
    ],
    "flotilla.model.errors": ["SpecError"],
    "flotilla.model.job": [
        "Affinity",
        "Dependency",
        "DependencyCondition",
        "GangMode",
        "GangSpec",
        "JobSpec",
        "LabelAffinity",
        "TaskSpec",
        "Toleration",
        "Topology",
        "TopologyScope",
    ],
    "flotilla.model.loader": ["load_scenario", "scenario_from_data"],
    "flotilla.model.quantity": ["format_quantity", "parse_quantity"],
    "flotilla.model.queue": ["Preemption", "PriorityClass", "QueueSpec", "QuotaSpec"],
    "flotilla.model.retry": ["ArraySpec", "Backoff", "RetryCause", "RetrySpec"],
    "flotilla.model.scenario": [
        "Expectation",
        "FairShare",
        "Mode",
        "Queueing",
        "Scenario",
        "ScenarioJobState",
        "Settings",
    ],
}
"""Where each exported name is defined."""
__getattr__ = lazy_exports(__name__, _MODULES)
