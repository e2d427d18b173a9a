"""Every extension point of the scheduling framework, in one place.

Each pluggable call takes one frozen input dataclass and returns a named result, so adding a
field never breaks a plugin. A plugin is any object with a ``name`` and one or more of the
methods below; the framework sorts its plugins once, by the protocols they implement
(``isinstance`` on these ``runtime_checkable`` protocols), and calls only those methods.
Optional capabilities that let the engine take a fast path (``RowLocalFilter``,
``RowLocalScore``, ``PostFilterPrecheck``) are protocols too, sorted the same way. Plugins
are loaded by entry point (group ``flotilla.plugins``) and grouped into profiles by
configuration.

Failure semantics, common to all points: a plugin that *raises* is a bug, not a verdict. The
framework does not swallow it; the cycle fails and the caller (simulator or service) reports
it. To say "no", return a result with ``ok=False`` and a reason a person can act on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from flotilla.framework.assignment_record import AssignmentRecord, PlacementRecord
from flotilla.framework.clusters import Cluster
from flotilla.framework.jobs import SchedulingJob, TaskRequest
from flotilla.framework.nodes import GpuAllocation, Mask
from flotilla.framework.resources import Vector
from flotilla.model.cluster import SIMULATED_LABEL

if TYPE_CHECKING:
    from flotilla.framework.quota_view import QuotaView


@dataclass
class CycleState:
    """Scratch space of one scheduling round, shared by the plugins (Kubernetes' CycleState).

    Plugins may cache what they computed under their own name; it is dropped after the round.
    """

    time: float
    data: dict[str, Any] = field(default_factory=dict)
    quota: QuotaView | None = None
    """The round's quota usage, published by the quota plugin for the engine's
    ``PreemptionContext`` (``framework/quota_view.py``); ``None`` without a quota tree."""


@dataclass(frozen=True)
class Status:
    """The named result of a yes/no extension point."""

    ok: bool = True
    reason: str | None = None
    deferrable: bool = False
    """A soft refusal (e.g. runtime quota): the job is retried in the cycle's leftover pass,
    where soft limits are lifted, so capacity nobody else wants is never left idle."""
    owner_limited: bool = False
    """Refused by a limit of the job's own owner alone: a ``strict-fifo`` queue goes on past
    it (as Slurm skips a job held by its association's limit), unless ``owner_limit_stop``."""

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, reason: str) -> Status:
        return cls(ok=False, reason=reason)

    @classmethod
    def over_owner_limit(cls, reason: str) -> Status:
        return cls(ok=False, reason=reason, owner_limited=True)


_SUCCESS = Status()


@dataclass(frozen=True)
class Placement:
    """Where one replica of one task runs."""

    task: str
    replica: int
    node: str
    row: int
    request: Vector
    gpus: GpuAllocation | None = None

    @property
    def gpu_ids(self) -> list[int]:
        return self.gpus.device_ids if self.gpus else []


@dataclass(frozen=True)
class Assignment:
    """A whole job placed on one cluster: every replica, all or nothing."""

    cluster: str
    placements: tuple[Placement, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return [placement.node for placement in self.placements]

    def held(self, size: int) -> Vector:
        """What the assignment holds: the sum of its placements' requests (read-only)."""
        total = np.zeros(size)
        for placement in self.placements:
            total += placement.request
        total.flags.writeable = False
        return total

    def to_json(self) -> dict[str, Any]:
        """Its one JSON form (``framework/assignment_record.py``), as its run stores it."""
        return AssignmentRecord(
            self.cluster,
            tuple(
                PlacementRecord(
                    p.task,
                    p.replica,
                    p.node,
                    tuple(p.gpu_ids),
                    p.gpus.shares if p.gpus else (),
                    p.gpus.memory if p.gpus else 0.0,
                )
                for p in self.placements
            ),
        ).marshal()

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], job: SchedulingJob, cluster: Cluster
    ) -> Assignment | None:
        """The stored assignment of ``job`` on ``cluster``'s current node table; ``None`` if
        a node or a task of it is gone."""
        requests = {task.name: task.request for task in job.tasks}
        placements = []
        for item in AssignmentRecord.unmarshal(data).placements:
            row = cluster.nodes.row.get(item.node)
            request = requests.get(item.task)
            if row is None or request is None:
                return None
            gpus = GpuAllocation(item.shares, item.gpu_memory) if item.shares else None
            placements.append(Placement(item.task, item.replica, item.node, row, request, gpus))
        return cls(cluster=cluster.name, placements=tuple(placements))


@dataclass(frozen=True)
class Decision:
    """What an ``AssignmentStrategy`` decided: an assignment, or ``None`` and why not."""

    assignment: Assignment | None
    reason: str

    @property
    def found(self) -> bool:
        return self.assignment is not None


# --- QueueSort ----------------------------------------------------------------------------


@runtime_checkable
class QueueSortPlugin(Protocol):
    """Orders jobs within a queue. Lower keys go first. Exactly one per profile.

    ``sort`` sorts a queue's jobs in place into exactly the order of ``sort_key`` — a plugin
    may do it faster than a key per job (the built-in one uses two stable C-level sorts).
    With the built-in ``priority-sort``, a snapshot may carry each queue already in that
    order (``SchedulingSnapshot.backlog``) and ``sort`` is not called at all."""

    name: str

    def sort_key(self, job: SchedulingJob) -> tuple[Any, ...]: ...

    def sort(self, jobs: list[SchedulingJob]) -> None: ...


# --- PreFilter ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PreFilterInput:
    job: SchedulingJob
    cycle: CycleState
    leftover_pass: bool = False
    """True in the pass after every queue had its turn: soft limits do not apply."""


@runtime_checkable
class PreFilterPlugin(Protocol):
    """Job-level admission before any node is looked at (quota, gang readiness)."""

    name: str

    def pre_filter(self, request: PreFilterInput) -> Status: ...


# --- Filter -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterInput:
    job: SchedulingJob
    task: TaskRequest
    cluster: Cluster
    cycle: CycleState
    rows: npt.NDArray[np.intp] | None = None
    """When set, only these node rows are asked about (in this order, possibly repeated): the
    mask returned has ``len(rows)`` entries. Only ``RowLocalFilter``s are given rows."""


@runtime_checkable
class FilterPlugin(Protocol):
    """Which nodes of a cluster could take one replica of ``task`` now: a boolean mask.

    Called once per replica with the cluster's current allocation, so it must be vectorised
    over nodes. ``explain`` is called only when no node is left, to say why in words
    (e.g. ``"3 nodes have too little gpu (need 8, most free 4)"``); return ``None`` when this
    plugin rejected no node. A filter with nothing to say may return ``nodes.everywhere``
    (the table's shared all-true mask, never to be modified), with or without ``rows``.

    A filter that can say more, so that the engine need not ask about every node each
    time, implements ``RowLocalFilter`` as well.
    """

    name: str

    def filter(self, request: FilterInput) -> Mask: ...

    def explain(self, request: FilterInput, rejected: Mask) -> str | None: ...


# --- Score --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreInput:
    job: SchedulingJob
    task: TaskRequest
    cluster: Cluster
    candidates: npt.NDArray[np.intp]
    """Rows of the nodes that passed every filter."""
    cycle: CycleState


@runtime_checkable
class ScorePlugin(Protocol):
    """Scores candidate nodes, higher is better, one float per candidate in [0, 1].

    Returns ``None`` when it has no opinion on this job (e.g. no preferred labels): cheaper
    than a vector of zeros, and equal in effect.

    A score that depends on each node's own row only implements ``RowLocalScore``."""

    name: str

    def score(self, request: ScoreInput) -> Vector | None: ...


RowVerdict = Callable[[int], bool]
RowScore = Callable[[int], float]


@runtime_checkable
class RowLocalFilter(FilterPlugin, Protocol):
    """A filter whose verdict for a node depends only on that node's row of the
    ``NodeTable`` (static description, free and allocated resources, devices) and on the
    *placement-relevant* parts of the request — the task's ``request`` vector, ``gpu``,
    ``gpu_memory`` and ``gpu_scope``, and the job's ``tolerations`` and ``affinity.nodes`` —
    never on other nodes, other job fields or the cycle state.

    Contract: ``filter`` honours ``FilterInput.rows`` (only those rows, in that order); its
    ``explain`` may read the whole table but likewise no other request field.
    ``row_filter(request)`` returns one node's verdict on Python values, exactly ``filter``'s
    for that row, or ``None`` when every node passes; it is built once per placement key, so
    it may read only the placement-relevant parts of the request, and must read the table's
    arrays when called (they change).

    What the engine does with it: when every filter and score of a profile is row-local, the
    ``EngineCaches`` keep an incremental best-node index per node table and placement key
    (``scheduler.node_index``) and re-ask only about rows that changed since the last
    placement of that key, and remember a failed request's verdict and explanation per
    table version (``scheduler.failures``). A filter without this protocol makes the engine
    scan every node (correct, only slower)."""

    def row_filter(self, request: FilterInput) -> RowVerdict | None: ...


@runtime_checkable
class RowLocalScore(ScorePlugin, Protocol):
    """A score whose value for a node depends only on its own row and the placement-relevant
    parts of the request (see ``RowLocalFilter``), so it is the same float whichever other
    candidates are asked about with it (``candidates`` may be any subset of rows, in any
    order; element-wise numpy arithmetic keeps that bit-exact).

    ``row_score(request)``: one node's score on Python floats, bit for bit ``score``'s for
    that row (the same operations in the same order); ``None`` exactly when ``score``
    returns ``None``."""

    def row_score(self, request: FilterInput) -> RowScore | None: ...


# --- Reserve / Unreserve ------------------------------------------------------------------


@dataclass(frozen=True)
class ReserveInput:
    job: SchedulingJob
    task: TaskRequest
    replica: int
    cluster: Cluster
    row: int


@dataclass(frozen=True)
class ReserveResult:
    """``gpus``: the devices chosen for the replica, when the plugin allocates devices."""

    status: Status = Status()
    gpus: GpuAllocation | None = None


@runtime_checkable
class ReservePlugin(Protocol):
    """Chooses and claims what a replica needs on node ``row`` beyond plain resources
    (GPU devices), while a placement is being worked out.

    ``unreserve`` must undo exactly what ``reserve`` did; it is called, in reverse order,
    when a later replica or plugin fails, and after every tentative placement (a strategy
    trying clusters). A committed placement is applied as it was reserved, without calling
    ``reserve`` again: state that must live for the rest of the round (quota usage) belongs in
    the running-set hooks (``RunningSetPlugin.add_running``), not here.
    """

    name: str

    def reserve(self, request: ReserveInput) -> ReserveResult: ...

    def unreserve(self, request: ReserveInput, result: ReserveResult) -> None: ...


# --- Permit -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PermitInput:
    job: SchedulingJob
    assignment: Assignment
    cycle: CycleState


@runtime_checkable
class PermitPlugin(Protocol):
    """Last word on a complete assignment before it is committed (gang readiness)."""

    name: str

    def permit(self, request: PermitInput) -> Status: ...


# --- PreBind ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreBindInput:
    job: SchedulingJob
    assignment: Assignment


@dataclass(frozen=True)
class PreBindResult:
    """Annotations merged into the assignment (e.g. ``CUDA_VISIBLE_DEVICES`` per replica)."""

    annotations: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class PreBindPlugin(Protocol):
    name: str

    def pre_bind(self, request: PreBindInput) -> PreBindResult: ...


# --- CycleStart and the running set ---------------------------------------------------------


@dataclass(frozen=True)
class CycleStartInput:
    """The round's snapshot (a ``flotilla.framework.snapshot.SchedulingSnapshot``)."""

    snapshot: Any
    cycle: CycleState


@runtime_checkable
class CycleStartPlugin(Protocol):
    """Builds the plugin's per-round state from the snapshot, kept in ``cycle.data``."""

    name: str

    def start_cycle(self, request: CycleStartInput) -> None: ...


@dataclass(frozen=True)
class RunningChange:
    """A running job leaving (evicted) or re-entering (restored) the round's view."""

    job: SchedulingJob
    assignment: Assignment
    cycle: CycleState
    held: Vector
    """What the job holds with ``assignment`` (the sum of its placements' requests)."""


@runtime_checkable
class RunningSetPlugin(Protocol):
    """Keeps per-round state true while preemption tries "what if these jobs were gone".

    Kubernetes' PreFilterExtensions.AddPod/RemovePod: ``remove_running`` must exactly undo the
    job's contribution, ``add_running`` restore it.
    """

    name: str

    def remove_running(self, request: RunningChange) -> None: ...

    def add_running(self, request: RunningChange) -> None: ...


# --- PostFilter ---------------------------------------------------------------------------


class PreemptionContext(Protocol):
    """What a PostFilter may ask of the round while looking for victims.

    ``fits_without`` evicts the given jobs in the round's view, tries to schedule ``job`` with
    the full profile and strategy, then restores everything: it never changes the round.
    """

    @property
    def running_jobs(self) -> Sequence[Any]:
        """``RunningJob``s of the round's current view (the snapshot plus this round's starts)."""
        ...

    @property
    def now(self) -> float:
        """The round's time (the snapshot's)."""
        ...

    def fits_without(self, job: SchedulingJob, victims: Sequence[str]) -> bool: ...

    def queue_share(self, queue: str, change: Vector | None = None) -> float:
        """Weighted dominant share of ``queue``, optionally after adding ``change``."""
        ...

    def queue_policy(self, queue: str) -> Any:
        """The queue's ``flotilla.model.queue.Preemption`` policy."""
        ...

    def quota_node(self, queue: str) -> int | None: ...

    def same_cohort(self, queue: str, other: str) -> bool:
        """Both queues draw on quota nodes under one root of the quota tree."""
        ...

    def borrowed(self, queue: str) -> Vector | None:
        """What the queue's quota node uses above its guarantee; ``None`` without a quota."""
        ...

    def within_guarantee(self, job: SchedulingJob, freed: Vector | None = None) -> bool:
        """The job's queue stays within its quota guarantee with the job added (and, when
        given, ``freed`` released first: what victims of its own queue hold)."""
        ...

    def gang_of(self, job_name: str) -> Sequence[str]:
        """Every running job that must be preempted together with ``job_name``."""
        ...


@dataclass(frozen=True)
class PostFilterInput:
    job: SchedulingJob
    reason: str
    cycle: CycleState
    context: PreemptionContext | None = None


@dataclass(frozen=True)
class PostFilterResult:
    """Jobs to evict so that ``job`` fits (preemption); empty when none would help.

    ``reason`` explains a refusal (shown as the job's pending reason) or, with victims, why
    they were chosen (recorded with each preemption).
    """

    victims: Sequence[str] = ()
    reason: str | None = None


@runtime_checkable
class PostFilterPlugin(Protocol):
    """Runs when a job could not be placed: may nominate victims to preempt."""

    name: str

    def post_filter(self, request: PostFilterInput) -> PostFilterResult: ...


@runtime_checkable
class PostFilterPrecheck(PostFilterPlugin, Protocol):
    """A PostFilter that can tell, once per queue and round, that it will not act.

    ``may_act(queue, context)`` returning False promises that ``post_filter`` returns an
    empty ``PostFilterResult()`` (no victims, no reason) for every job of that queue during
    this round, so the engine skips calling it. A PostFilter without it is always called."""

    def may_act(self, queue: str, context: PreemptionContext) -> bool: ...


# --- Waiting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitingInput:
    """A job left waiting in this round's main pass: not admitted or not placed, and
    preemption (if any PostFilter was asked) did not make room. Not called for a soft
    refusal (runtime quota), which is retried in the leftover pass of the same round."""

    job: SchedulingJob
    reason: str
    cycle: CycleState


@runtime_checkable
class WaitingPlugin(Protocol):
    """Told about each job the round leaves waiting, in decision order, so it can hold back
    what the job will need for the rest of the round (the quota plugin reserves the queue's
    unused guarantee when its queue cannot reclaim it later, as Kueue does). Returns
    nothing; it must not change the node tables."""

    name: str

    def job_waits(self, request: WaitingInput) -> None: ...


# --- AssignmentStrategy -------------------------------------------------------------------


class Placer(Protocol):
    """Tries to place the whole job on one cluster with the profile's plugins.

    Never mutates the cluster; the same call returns the same answer within a decision.
    """

    def __call__(self, cluster: Cluster) -> Decision: ...


@dataclass(frozen=True)
class SelectionInput:
    job: SchedulingJob
    clusters: Sequence[Cluster]
    """Ready clusters that satisfy the job's required cluster affinity, in declaration order."""
    place: Placer


def cluster_admits(cluster: Cluster, job: SchedulingJob) -> bool:
    """Whether ``cluster`` may take ``job`` at all: it carries every label of the job's
    required cluster affinity, and — a simulated cluster beside real ones
    (``model.fleet.SIMULATED_LABEL``) — the job asks for it by such a label."""
    required = job.affinity.clusters.required
    if any(cluster.labels.get(key) != value for key, value in required.items()):
        return False
    return bool(required) or cluster.labels.get(SIMULATED_LABEL) != "true"


def no_cluster_reason(job: SchedulingJob) -> str:
    """Why a job waits when no cluster is a candidate: the engine and every strategy say it
    in these words."""
    required = job.affinity.clusters.required
    if required:
        labels = ", ".join(f"{k}={v}" for k, v in required.items())
        return f"no ready cluster matches required cluster affinity {labels}"
    return "no ready cluster"


@runtime_checkable
class AssignmentStrategy(Protocol):
    """Picks the compute cluster for a job (Michelangelo's AssignmentStrategy).

    Returns ``Decision(assignment, reason)``: an assignment from ``place`` on the chosen
    cluster, or ``None`` with a reason naming what blocked the job. Must not mutate clusters.
    """

    name: str

    def select(self, request: SelectionInput) -> Decision: ...
