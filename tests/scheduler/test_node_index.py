"""The incremental best-node index picks exactly the node the full scan picks.

Random small fleets (GPU nodes with NUMA groups and PCIe switches, fractions, GPU memory,
taints, labels) go through random sequences of placements (kept or rolled back), releases
and snapshots on a table placed with the engine's caches and on a twin placed without them
(the reference mode): every decision and every table must agree, and row-local plugins asked
about a subset of rows must agree with the whole mask.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.framework import nodes as nodes_module
from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import (
    CycleState,
    FilterInput,
    Placement,
    ReserveInput,
    ScoreInput,
)
from flotilla.framework.jobs import SchedulingJob, build_job
from flotilla.framework.nodes import Mask, NodeTable
from flotilla.framework.registry import Framework
from flotilla.framework.resources import EPSILON, ResourceSpace
from flotilla.model.cluster import Taint
from flotilla.model.job import JobSpec, TopologyScope
from flotilla.model.node_info import NodeInfo
from flotilla.plugins.devices import GpuDevices
from flotilla.plugins.fragmentation import Mix, MixType
from flotilla.scheduler import node_index, placement
from flotilla.scheduler.caches import EngineCaches

SPACE = ResourceSpace(["cpu", "memory", "gpu", "gpu_memory"])
CYCLE = CycleState(
    time=0,
    # The mix gpu-packing's fragmentation score expects (fixed for a round, as in the engine).
    data={
        "gpu-fragmentation": Mix(
            (MixType(250, 1.0, 4.0, 3), MixType(1000, 2.0, 4.0, 5), MixType(4000, 3.0, 4.0, 1))
        )
    },
)
PROFILES = {name: Framework.from_profile(name) for name in ("default", "spread", "gpu-packing")}

node_kinds = st.fixed_dictionaries(
    {
        "cpu": st.sampled_from([4, 8, 16]),
        "gpus": st.sampled_from([0, 0, 2, 4, 8]),
        "numa": st.sampled_from([1, 2]),
        "pcie": st.sampled_from([None, 1, 2]),
        "gpu_memory": st.sampled_from([None, 16.0]),
        "zone": st.sampled_from(["a", "b"]),
        "rack": st.sampled_from(["r1", "r2"]),
        "tainted": st.booleans(),
    }
)

shapes = st.fixed_dictionaries(
    {
        "cpu": st.sampled_from([1, 2, 3, 4]),
        "gpu": st.sampled_from([0, 0, 0.25, 0.5, 1, 2, 4]),
        "gpu_memory": st.sampled_from([0, 0, 4.0]),
        "scope": st.sampled_from([None, "device", "pcie", "numa", "node"]),
        "replicas": st.sampled_from([1, 1, 2, 3]),
        "tolerate": st.booleans(),
        "required": st.sampled_from([None, "a", "b"]),
        "preferred": st.sampled_from([None, "r1", "r2"]),
    }
)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(0, 7), st.booleans()),
        st.tuples(st.just("release"), st.integers(0, 50), st.just(False)),
        st.tuples(st.just("snapshot"), st.just(0), st.just(False)),
    ),
    min_size=1,
    max_size=40,
)


def _node(index: int, kind: dict[str, Any]) -> NodeInfo:
    gpus = kind["gpus"]
    numa = kind["numa"] if gpus else 1
    pcie = kind["pcie"] if gpus and kind["pcie"] is not None else None
    if pcie is not None and pcie < numa:
        pcie = numa
    capacity: dict[str, float] = {"cpu": kind["cpu"], "memory": 64.0, "gpu": gpus}
    memory = kind["gpu_memory"] if gpus else None
    if memory is not None:
        capacity["gpu_memory"] = memory * gpus
    return NodeInfo(
        name=f"n{index}",
        capacity=capacity,
        labels={"zone": kind["zone"], "rack": kind["rack"]},
        taints=(Taint(key="gpu", value="true"),) if kind["tainted"] else (),
        gpu_count=gpus,
        gpu_memory=memory,
        numa_nodes=numa,
        pcie_switches=pcie,
    )


def _job(index: int, shape: dict[str, Any]) -> SchedulingJob:
    resources: dict[str, float] = {"cpu": shape["cpu"], "memory": 4.0}
    if shape["gpu"]:
        resources["gpu"] = shape["gpu"]
        if shape["gpu_memory"]:
            resources["gpu_memory"] = shape["gpu_memory"]
    task: dict[str, Any] = {"name": "main", "replicas": shape["replicas"], "resources": resources}
    if shape["scope"] is not None and shape["gpu"]:
        task["topology"] = {"gpu": shape["scope"]}
    affinity: dict[str, Any] = {"nodes": {}}
    if shape["required"]:
        affinity["nodes"]["required"] = {"zone": shape["required"]}
    if shape["preferred"]:
        affinity["nodes"]["preferred"] = {"rack": shape["preferred"]}
    spec = JobSpec.model_validate(
        {
            "name": f"s{index}",
            "queue": "q",
            "tasks": [task],
            "affinity": affinity,
            "tolerations": [{"key": "gpu", "operator": "Exists"}] if shape["tolerate"] else [],
        }
    )
    return build_job(
        spec,
        name=f"s{index}",
        space=SPACE,
        sequence=index,
        submit_time=0.0,
        priority=0,
        preemptible=True,
    )


def _check_row_subsets(framework: Framework, request: FilterInput, rows: Any) -> None:
    """Row-local plugins asked about ``rows`` say what they say about those rows in full."""
    nodes = request.cluster.nodes
    subset = FilterInput(request.job, request.task, request.cluster, request.cycle, rows=rows)
    for plugin in framework.filters:
        whole: Mask = plugin.filter(request)
        part: Mask = plugin.filter(subset)
        expected = whole[rows] if whole is not nodes.everywhere else np.ones(len(rows), bool)
        actual = part if part is not nodes.everywhere else np.ones(len(rows), bool)
        assert np.array_equal(actual, expected), plugin.name
    everything = np.arange(len(nodes), dtype=np.intp)
    for scorer in framework.scores:
        full = scorer.score(
            ScoreInput(request.job, request.task, request.cluster, everything, CYCLE)
        )
        some = scorer.score(ScoreInput(request.job, request.task, request.cluster, rows, CYCLE))
        if full is None:
            assert some is None
        else:
            assert some is not None
            assert full[rows].tobytes() == some.tobytes(), scorer.name
    _check_row_paths(framework, request, rows)


def _check_row_paths(framework: Framework, request: FilterInput, rows: Any) -> None:
    """Plugins' per-row Python paths agree bit for bit with their vectorised answers, and so
    does the index's per-row total with the total the vectorised path sums."""
    nodes = request.cluster.nodes
    for plugin in framework.filters:
        whole = plugin.filter(request)
        verdict = plugin.row_filter(request)  # type: ignore[attr-defined]
        for row in rows.tolist():
            expected = True if whole is nodes.everywhere else bool(whole[row])
            assert (True if verdict is None else verdict(row)) is expected, plugin.name
    everything = np.arange(len(nodes), dtype=np.intp)
    total = np.zeros(len(nodes))
    for scorer in framework.scores:
        full = scorer.score(
            ScoreInput(request.job, request.task, request.cluster, everything, CYCLE)
        )
        score = scorer.row_score(request)  # type: ignore[attr-defined]
        assert (full is None) == (score is None), scorer.name
        if full is not None and score is not None:
            total += full
            for row in rows.tolist():
                assert np.float64(score(row)).tobytes() == full[row].tobytes(), scorer.name
    for row in rows.tolist():
        _check_whole_gpu_reservation(request, row)
    evaluate = node_index.row_evaluator(framework, request)
    assert evaluate is not None
    mask = np.ones(len(nodes), dtype=bool)
    for plugin in framework.filters:
        mask &= plugin.filter(request)
    for row in rows.tolist():
        expected = total[row] if mask[row] else -np.inf
        assert np.float64(evaluate(row)).tobytes() == np.float64(expected).tobytes()


def _check_whole_gpu_reservation(request: FilterInput, row: int) -> None:
    """``GpuDevices.reserve`` picks whole GPUs on Python lists exactly as the numpy version
    it replaced did (kept here as the reference)."""
    task = request.task
    if task.gpu < 1:
        return
    nodes = request.cluster.nodes
    reserve_input = ReserveInput(request.job, task, 0, request.cluster, row)
    result = GpuDevices().reserve(reserve_input)
    usable = (nodes.device_free[row] >= 1.0 - EPSILON) & (
        nodes.device_memory_free[row] >= task.gpu_memory / task.gpu - EPSILON
    )
    count = int(task.gpu)
    expected: list[int] | None = None
    if not (task.gpu_scope is TopologyScope.DEVICE and count > 1):
        blocks = {TopologyScope.NUMA: nodes.numa_block, TopologyScope.PCIE: nodes.pcie_block}
        grouping = blocks.get(task.gpu_scope, nodes.numa_block)  # type: ignore[arg-type]
        by_group: dict[int, list[int]] = {}
        for device in np.flatnonzero(usable):
            by_group.setdefault(int(grouping[row, device]), []).append(int(device))
        ordered = sorted(by_group.items(), key=lambda item: (len(item[1]), item[0]))
        whole = [devices[:count] for _, devices in ordered if len(devices) >= count]
        if whole:
            expected = whole[0]
        elif task.gpu_scope not in blocks:
            merged = [device for _, devices in ordered for device in devices][:count]
            expected = merged if len(merged) == count else None
    if expected is None:
        assert result.gpus is None and not result.status.ok
    else:
        assert result.gpus is not None
        assert result.gpus.device_ids == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(node_kinds, min_size=1, max_size=12),
    job_shapes=st.lists(shapes, min_size=8, max_size=8),
    steps=operations,
    profile=st.sampled_from(sorted(PROFILES)),
    short_log=st.booleans(),
    rebuild_often=st.booleans(),
    row_path=st.booleans(),
    subset_seed=st.integers(0, 2**16),
)
def test_the_index_picks_the_node_the_full_scan_picks(
    kinds: list[dict[str, Any]],
    job_shapes: list[dict[str, Any]],
    steps: list[tuple[str, int, bool]],
    profile: str,
    short_log: bool,
    rebuild_often: bool,
    row_path: bool,
    subset_seed: int,
) -> None:
    _place_against_the_full_scan(
        kinds, job_shapes, steps, profile, short_log, rebuild_often, row_path, subset_seed
    )


busy_operations = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(0, 7), st.just(True)),
        st.tuples(st.just("place"), st.integers(0, 7), st.just(False)),
        st.tuples(st.just("release"), st.integers(0, 50), st.just(False)),
    ),
    min_size=20,
    max_size=80,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(node_kinds, min_size=2, max_size=12),
    job_shapes=st.lists(shapes, min_size=8, max_size=8),
    steps=busy_operations,
    profile=st.sampled_from(sorted(PROFILES)),
    subset_seed=st.integers(0, 2**16),
)
def test_rows_replayed_one_by_one_keep_the_full_scans_choice(
    kinds: list[dict[str, Any]],
    job_shapes: list[dict[str, Any]],
    steps: list[tuple[str, int, bool]],
    profile: str,
    subset_seed: int,
) -> None:
    """Long runs of placements and releases on one table, every change replayed on Python
    floats: the best row kept across updates (bin-pack raises the chosen node's score,
    spread lowers it) must stay the one ``argmax`` over the whole table picks."""
    _place_against_the_full_scan(kinds, job_shapes, steps, profile, False, False, True, subset_seed)


def _place_against_the_full_scan(
    kinds: list[dict[str, Any]],
    job_shapes: list[dict[str, Any]],
    steps: list[tuple[str, int, bool]],
    profile: str,
    short_log: bool,
    rebuild_often: bool,
    row_path: bool,
    subset_seed: int,
) -> None:
    framework = PROFILES[profile]
    assert framework.row_local
    table = NodeTable(SPACE, [_node(i, kind) for i, kind in enumerate(kinds)])
    cluster = Cluster(name="c", order=0, labels={}, cost={}, nodes=table)
    # The reference: the same placements on a twin table, without the engine's caches.
    reference = Cluster(name="c", order=0, labels={}, cost={}, nodes=table.copy())
    caches = EngineCaches(framework)
    jobs = [_job(i, shape) for i, shape in enumerate(job_shapes)]
    random = np.random.default_rng(subset_seed)
    held: list[Placement] = []

    # Small fleets would rebuild after almost every change: make them replay changed rows
    # too (a fraction of 0 never rebuilds), and clear the change log early now and then.
    # Changed rows are replayed on Python floats or vectorised (``row_path``).
    limit = 0 if short_log else nodes_module._CHANGE_LOG_LIMIT
    fraction = node_index.REBUILD_FRACTION if rebuild_often else 0
    with (
        mock.patch.object(nodes_module, "_CHANGE_LOG_LIMIT", limit),
        mock.patch.object(node_index, "REBUILD_FRACTION", fraction),
        mock.patch.object(node_index, "MIN_NODES", 0),
        mock.patch.object(node_index, "ROW_PATH_LIMIT", 1000 if row_path else 0),
    ):
        for action, number, keep in steps:
            if action == "place":
                job = jobs[number]
                request = FilterInput(job, job.tasks[0], cluster, CYCLE)
                rows = random.integers(0, len(table), size=random.integers(1, 5))
                _check_row_subsets(framework, request, rows.astype(np.intp))
                decision = placement.place_job(
                    framework, job, cluster, CYCLE, keep=keep, caches=caches
                )
                expected = placement.place_job(framework, job, reference, CYCLE, keep=keep)
                assert decision == expected
                assert _content(cluster.nodes) == _content(reference.nodes)
                if keep and decision.assignment is not None:
                    held.extend(decision.assignment.placements)
            elif action == "release" and held:
                done = held.pop(number % len(held))
                cluster.nodes.release(done.row, done.request, done.gpus)
                reference.nodes.release(done.row, done.request, done.gpus)
            elif action == "snapshot":
                cluster = cluster.snapshot()
                reference = reference.snapshot()


def _content(table: NodeTable) -> bytes:
    """Everything ``allocate``/``release`` change, over the whole table."""
    arrays = (table.allocated, table.free, table.device_free, table.device_memory_free)
    return b"".join(array.tobytes() for array in arrays)


@mock.patch.object(node_index, "MIN_NODES", 0)
def test_a_profile_with_a_plugin_that_is_not_row_local_uses_the_full_scan() -> None:
    class Anywhere:
        name = "anywhere"

        def filter(self, request: FilterInput) -> Mask:
            return request.cluster.nodes.everywhere

        def explain(self, request: FilterInput, rejected: Mask) -> str | None:
            return None

    default = PROFILES["default"]
    mixed = Framework((*default.plugins, Anywhere()))
    assert not mixed.row_local
    caches = EngineCaches(mixed)
    table = NodeTable(SPACE, [_node(0, _plain_kind())])
    cluster = Cluster(name="c", order=0, labels={}, cost={}, nodes=table)
    job = _job(0, _plain_shape())
    decision = placement.place_job(mixed, job, cluster, CYCLE, keep=True, caches=caches)
    assert decision.found
    assert not caches.has_index(table)


@mock.patch.object(node_index, "MIN_NODES", 0)
def test_a_snapshot_starts_without_an_index_and_with_an_empty_change_log() -> None:
    table = NodeTable(SPACE, [_node(i, _plain_kind()) for i in range(3)])
    cluster = Cluster(name="c", order=0, labels={}, cost={}, nodes=table)
    framework = PROFILES["default"]
    caches = EngineCaches(framework)
    job = _job(0, _plain_shape())
    placement.place_job(framework, job, cluster, CYCLE, keep=True, caches=caches)
    assert caches.has_index(table)
    assert table.change_count == 1
    copy = table.copy()
    assert not caches.has_index(copy)
    assert copy.change_count == 0
    assert copy.changed_rows is not table.changed_rows


def _plain_kind() -> dict[str, Any]:
    """An untainted 8-CPU node without GPUs."""
    return dict(
        cpu=8, gpus=0, numa=1, pcie=None, gpu_memory=None, zone="a", rack="r1", tainted=False
    )


def _plain_shape() -> dict[str, Any]:
    """A one-CPU job without GPUs or constraints."""
    return dict(
        cpu=1,
        gpu=0,
        gpu_memory=0,
        scope=None,
        replicas=1,
        tolerate=False,
        required=None,
        preferred=None,
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(node_kinds, min_size=1, max_size=8),
    job_shapes=st.lists(shapes, min_size=8, max_size=8),
    steps=operations,
)
def test_one_replica_jobs_are_placed_as_the_general_path_places_them(
    kinds: list[dict[str, Any]],
    job_shapes: list[dict[str, Any]],
    steps: list[tuple[str, int, bool]],
) -> None:
    """The shortcut for one-task, one-replica jobs decides, allocates and explains exactly
    like the replica-by-replica path, kept or rolled back."""
    framework = PROFILES["default"]
    table = NodeTable(SPACE, [_node(i, kind) for i, kind in enumerate(kinds)])
    fast = Cluster(name="c", order=0, labels={}, cost={}, nodes=table)
    general = Cluster(name="c", order=0, labels={}, cost={}, nodes=table.copy())
    jobs = [_job(i, {**shape, "replicas": 1}) for i, shape in enumerate(job_shapes)]
    held: list[Placement] = []
    for action, number, keep in steps:
        if action == "place":
            job = jobs[number]
            quick = placement.place_job(framework, job, fast, CYCLE, keep=keep)
            slow = placement._place_replicas(
                framework, job, general, CYCLE, keep=keep, minimum=None, caches=None
            )
            assert quick == slow
            if keep and quick.assignment is not None:
                held.extend(quick.assignment.placements)
        elif action == "release" and held:
            done = held.pop(number % len(held))
            fast.nodes.release(done.row, done.request, done.gpus)
            general.nodes.release(done.row, done.request, done.gpus)
        for name in ("allocated", "free", "device_free", "device_memory_free"):
            assert getattr(fast.nodes, name).tobytes() == getattr(general.nodes, name).tobytes()
