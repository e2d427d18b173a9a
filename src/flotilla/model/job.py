"""Jobs: task groups, gangs, affinity and tolerations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from flotilla.model.base import MAX_COUNT, Labels, Name, ResourceList, Seconds, Strict
from flotilla.model.cluster import TaintEffect
from flotilla.model.durations import PositiveDuration
from flotilla.model.retry import ArraySpec, RetrySpec


class TopologyScope(StrEnum):
    DEVICE = "device"
    PCIE = "pcie"
    NUMA = "numa"
    NODE = "node"


class Topology(Strict):
    gpu: TopologyScope | None = None


class TaskSpec(Strict):
    """A role of a job (head, worker…): ``replicas`` copies, each asking for ``resources``."""

    name: Name
    replicas: int = Field(default=1, ge=1, le=MAX_COUNT)
    resources: ResourceList
    topology: Topology | None = None
    share_gpu: bool = False
    """A fraction (``gpu`` < 1) that may share its device with other tasks that also opt in,
    on a cluster whose ``gpu_sharing`` is ``none`` (elsewhere it changes nothing)."""

    @model_validator(mode="after")
    def _gpu_shape(self) -> TaskSpec:
        gpu = self.resources.get("gpu", 0.0)
        if gpu > 1 and gpu != int(gpu):
            raise ValueError(
                f"resources.gpu: {gpu:g} is neither a share of one device (< 1) nor whole GPUs"
            )
        return self


class GangMode(StrEnum):
    STRICT = "strict"
    NON_STRICT = "non-strict"


class GangSpec(Strict):
    min_member: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    mode: GangMode = GangMode.STRICT
    timeout: PositiveDuration = 600
    name: str | None = None


class LabelAffinity(Strict):
    required: Labels = {}
    preferred: Labels = {}


class Affinity(Strict):
    clusters: LabelAffinity = LabelAffinity()
    nodes: LabelAffinity = LabelAffinity()


class Toleration(Strict):
    """Tolerates taints with this key (any key if empty), value (any if omitted) and effect."""

    key: str = ""
    operator: str = Field(default="Equal", pattern="^(Equal|Exists)$")
    value: str | None = None
    effect: TaintEffect | None = None


GPU_NODE_TOLERATIONS: tuple[Toleration, ...] = (
    Toleration(key="nvidia.com/gpu", operator="Exists"),
    Toleration(key="sku", operator="Equal", value="gpu"),
)
"""The taints clouds put on GPU nodes (GKE's ``nvidia.com/gpu=present:NoSchedule``, AKS's
recommended ``sku=gpu:NoSchedule``), tolerated by every job that asks for a GPU, as
Kubernetes' ExtendedResourceToleration admission plugin adds them: so CPU work stays off
GPU nodes and GPU jobs need no toleration of their own (``JobSpec.tolerated``)."""


class DependencyCondition(StrEnum):
    """What a dependency must end in for the job that waits on it to start; which ends meet
    each one is the lifecycle core's table (``flotilla.lifecycle.dependencies``)."""

    SUCCEEDED = "succeeded"
    """Succeeded (Slurm's ``afterok``)."""
    FINISHED = "finished"
    """Ended in any way: succeeded, failed or cancelled (Slurm's ``afterany``)."""
    FAILED = "failed"
    """Ended in any way but success: failed or cancelled (Slurm's ``afternotok``)."""
    FINISHED_NOT_CANCELLED = "finished_not_cancelled"
    """Succeeded or failed: what ``finished`` meant before it accepted a cancelled job."""
    FAILED_NOT_CANCELLED = "failed_not_cancelled"
    """Failed: what ``failed`` meant before it accepted a cancelled job."""


def dependency_cycles(edges: Mapping[int, Sequence[int]]) -> list[list[int]]:
    """The cycles of a dependency graph (job index → indices it depends on), each as a path
    that starts and ends at the same job; each cycle is found once."""
    cycles: list[list[int]] = []
    done: set[int] = set()
    for start in sorted(edges):
        if start in done:
            continue
        path, on_path = [start], {start}
        pending = [iter(edges.get(start, ()))]
        while pending:
            following = next(pending[-1], None)
            if following is None:
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                pending.pop()
            elif following in on_path:
                cycles.append([*path[path.index(following) :], following])
            elif following not in done:
                path.append(following)
                on_path.add(following)
                pending.append(iter(edges.get(following, ())))
    return cycles


class Dependency(Strict):
    """Start only after another job ended as ``condition`` says (Slurm's ``--dependency``).

    ``job`` names it: a job of the same submission by name, else the latest job of that name
    in this job's queue, ``QUEUE/NAME`` for another queue, or a job id."""

    job: str = Field(min_length=1, max_length=507)
    condition: DependencyCondition = DependencyCondition.SUCCEEDED


class JobTopology(Strict):
    """Extension: keep the job's replicas in one domain of a cluster's topology level (a
    node-label key the cluster declares in ``topology``)."""

    required: str | None = None
    """All replicas within one domain of this level, or the job waits."""
    preferred: str | None = None
    """One domain of this level if any can hold the job, else anywhere."""

    @model_validator(mode="after")
    def _one_level(self) -> JobTopology:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("give one of required or preferred (a topology level)")
        return self

    @property
    def level(self) -> str:
        level = self.required if self.required is not None else self.preferred
        assert level is not None
        return level


PREEMPTION_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")
"""The signals a job may ask to get before the kill: each backend's supervisor passes these on
(a stop, a kill word or a job-control signal would not give the job its grace)."""


class JobPreemption(Strict):
    """Extension: how a preempted run is told before it is stopped."""

    grace: PositiveDuration = 30
    """Seconds between the signal and the kill."""
    signal: str = "SIGTERM"
    """The signal sent first (a name such as ``SIGUSR1``)."""

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, name: str) -> str:
        if name not in PREEMPTION_SIGNALS:
            raise ValueError(f"{name!r}: give one of {', '.join(PREEMPTION_SIGNALS)}")
        return name


class JobSpec(Strict):
    """A job as submitted: the scenario contract's job schema."""

    name: Name
    count: int | None = Field(default=None, ge=1)
    queue: str
    submit_at: Seconds = 0
    duration: Seconds | None = None
    cancel_at: Seconds | None = None
    hold_at: Seconds | None = None
    """Scenario: a user holds the job then (``flotilla hold``); only a queued job is held."""
    release_at: Seconds | None = None
    """Scenario: a user releases the held job then (``flotilla release``)."""
    priority: int | None = None
    priority_class: str | None = None
    preemptible: bool | None = None
    type: str = "command"
    tasks: list[TaskSpec] = Field(min_length=1)
    gang: GangSpec | None = None
    affinity: Affinity = Affinity()
    tolerations: list[Toleration] = []
    labels: Labels = {}
    annotations: Labels = {}
    user: str | None = None
    max_runtime: PositiveDuration | None = None
    payload: dict[str, Any] | None = None
    depends_on: list[Dependency] = Field(default=[], max_length=1000)
    hold_if_unfit: bool = False
    """Keep the job queued even if no cluster of the fleet could ever hold it (a fleet that
    will grow); by default such a job is refused at submission."""
    retry: RetrySpec | None = None
    array: ArraySpec | None = None
    topology: JobTopology | None = None
    """Extension: all the job's replicas within one domain of a topology level."""
    preemption: JobPreemption | None = None
    """Extension: the signal and grace a preempted run gets before it is killed."""
    min_runtime: PositiveDuration | None = None
    """Extension: never a preemption victim during its run's first ``min_runtime`` seconds."""
    checkpoint_every: PositiveDuration | None = None
    """Extension: the job saves its work every this many seconds of its run: preemption
    prefers victims with the least GPU time since their last checkpoint."""

    @model_validator(mode="after")
    def _priority_once(self) -> JobSpec:
        if self.priority is not None and self.priority_class is not None:
            raise ValueError("priority and priority_class: give one, not both")
        if self.array is not None and self.count is not None:
            raise ValueError(
                "array and count: give one, not both (count makes independent copies, array "
                "one array of elements)"
            )
        names = [task.name for task in self.tasks]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"tasks: duplicate task name {name!r}")
        if self.gang is not None and self.gang.min_member is not None and self.gang.name is None:
            members = sum(task.replicas for task in self.tasks)
            if self.gang.min_member > members:
                raise ValueError(
                    f"gang.min_member: {self.gang.min_member} is more than the job's "
                    f"{members} replicas"
                )
            if self.gang.mode is GangMode.STRICT and self.gang.min_member < members:
                raise ValueError(
                    f"gang.min_member: {self.gang.min_member} is fewer than the job's {members} "
                    "replicas; a strict gang places every member at once (use mode: non-strict "
                    "to start with fewer)"
                )
        return self

    def tolerated(self) -> tuple[Toleration, ...]:
        """The job's tolerations, with ``GPU_NODE_TOLERATIONS`` when a task asks for a GPU:
        what placement and the pods' specs use."""
        if not any(task.resources.get("gpu", 0.0) > 0 for task in self.tasks):
            return tuple(self.tolerations)
        extra = tuple(t for t in GPU_NODE_TOLERATIONS if t not in self.tolerations)
        return (*self.tolerations, *extra)

    def job_names(self) -> list[str]:
        if self.array is not None:
            return [f"{self.name}-{index}" for index in range(self.array.size)]
        if self.count is None:
            return [self.name]
        return [f"{self.name}-{index}" for index in range(self.count)]
