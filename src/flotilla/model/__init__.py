"""Typed specs of everything Flotilla schedules, and their validation.

The bottom layer: it imports nothing else of Flotilla.
"""

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
