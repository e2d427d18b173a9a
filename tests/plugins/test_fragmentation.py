"""gpu-fragmentation (Score): fragmentation-aware GPU packing (FGD) and the rules that
protect GPUs, on the same per-device model as gpu-devices."""

from __future__ import annotations

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import CycleState, FilterInput, ScoreInput
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.nodes import GpuAllocation
from flotilla.framework.registry import Framework
from flotilla.plugins.fit import BinPackScore
from flotilla.plugins.fragmentation import (
    MIX_TYPES,
    GpuFragmentationScore,
    Mix,
    MixType,
    mix_of,
)
from tests.builders import cluster, fleet, job, node, scenario

GI = 2.0**30
SCORE = GpuFragmentationScore()


def _cycle(*types: MixType) -> CycleState:
    return CycleState(time=0, data={SCORE.name: Mix(types)})


def _scores(j: SchedulingJob, c: Cluster, cycle: CycleState) -> list[float]:
    candidates = np.arange(len(c.nodes), dtype=np.intp)
    result = SCORE.score(ScoreInput(j, j.tasks[0], c, candidates, cycle))
    return [float(value) for value in result]


def _best(j: SchedulingJob, c: Cluster, cycle: CycleState) -> str:
    scores = _scores(j, c, cycle)
    return c.nodes.names[int(np.argmax(scores))]


def _hold(c: Cluster, row: int, cpu: float, shares: tuple[tuple[int, float], ...]) -> None:
    request = c.nodes.space.vector({"cpu": cpu, "gpu": sum(share for _, share in shares)})
    c.nodes.allocate(row, request, GpuAllocation(shares=shares) if shares else None)


def test_a_cpu_only_job_prefers_a_node_without_gpus() -> None:
    f = fleet(
        scenario(
            clusters=[
                cluster("c", node("gpu", cpu=64, memory="256Gi", gpu=8), node("plain", cpu=16))
            ],
            jobs=[job(cpu=4)],
        )
    )
    c = f.cluster()
    # Even with no GPU job in sight (empty mix), and although the GPU node is the larger.
    assert _best(f.job("j"), c, CycleState(time=0)) == "plain"
    assert _best(f.job("j"), c, _cycle(MixType(1000, 8.0, 0.0, 10))) == "plain"


def test_a_gpu_node_whose_gpus_are_all_taken_is_as_good_as_a_cpu_node_for_cpu_work() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("gpu", cpu=16, gpu=2), node("plain", cpu=16))],
            jobs=[job(cpu=4)],
        )
    )
    c = f.cluster()
    _hold(c, 0, 4, ((0, 1.0), (1, 1.0)))
    # Both have no free GPU; best fit then prefers the busier node.
    assert _best(f.job("j"), c, CycleState(time=0)) == "gpu"


def test_cpu_work_is_kept_off_the_cpus_that_free_gpus_need() -> None:
    """Two GPU nodes, the CPU-only fleet is full: the CPU-only job goes where taking its CPU
    leaves every free GPU usable by the expected 1-GPU, 8-CPU jobs."""
    f = fleet(
        scenario(
            clusters=[cluster("c", node("tight", cpu=16, gpu=2), node("roomy", cpu=64, gpu=2))],
            jobs=[job(cpu=12)],
        )
    )
    c = f.cluster()
    assert _best(f.job("j"), c, _cycle(MixType(1000, 8.0, 0.0, 10))) == "roomy"


def test_a_fraction_fills_a_sliver_rather_than_opening_a_whole_device() -> None:
    """Node a has a device half used, node b a device a quarter used and far more CPU in use
    (bin-packing alone would pick b). Half-GPU jobs are the mix: on a, the half fills the
    device exactly; on b it would leave a quarter nobody in the mix can use."""
    f = fleet(
        scenario(
            clusters=[cluster("c", node("a", cpu=32, gpu=2), node("b", cpu=32, gpu=2))],
            jobs=[job(cpu=1, gpu=0.5)],
        )
    )
    c = f.cluster()
    _hold(c, 0, 1, ((0, 0.5),))
    _hold(c, 1, 24, ((0, 0.25),))
    j = f.job("j")
    binpack = BinPackScore().score(
        ScoreInput(j, j.tasks[0], c, np.arange(2, dtype=np.intp), CycleState(time=0))
    )
    assert int(np.argmax(binpack)) == 1
    assert _best(j, c, _cycle(MixType(500, 1.0, 0.0, 10))) == "a"


def test_a_fraction_prefers_a_partly_used_device_to_an_idle_node() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("idle", cpu=32, gpu=4), node("used", cpu=32, gpu=4))],
            jobs=[job(cpu=1, gpu=0.25)],
        )
    )
    c = f.cluster()
    _hold(c, 1, 1, ((2, 0.5),))
    assert _best(f.job("j"), c, CycleState(time=0)) == "used"


def test_whole_gpus_keep_whole_nodes_free_for_the_big_jobs_of_the_mix() -> None:
    """A 1-GPU job between a node with 7 idle GPUs and a fully idle one: the 8-GPU jobs of the
    mix can still use the idle node only if the small job goes to the other."""
    f = fleet(
        scenario(
            clusters=[cluster("c", node("idle", cpu=96, gpu=8), node("seven", cpu=96, gpu=8))],
            jobs=[job(cpu=8, gpu=1)],
        )
    )
    c = f.cluster()
    _hold(c, 1, 8, ((0, 1.0),))
    assert _best(f.job("j"), c, _cycle(MixType(8000, 64.0, 0.0, 5))) == "seven"


def test_without_gpus_in_the_cluster_the_score_is_binpacks() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("a", cpu=8), node("b", cpu=16), node("c", cpu=4))],
            jobs=[job(cpu=2, memory="1Gi")],
        )
    )
    c, j = f.cluster(), f.job("j")
    c.nodes.allocate(1, c.nodes.space.vector({"cpu": 6}), None)
    request = ScoreInput(j, j.tasks[0], c, np.arange(3, dtype=np.intp), CycleState(time=0))
    assert SCORE.score(request).tobytes() == BinPackScore().score(request).tobytes()


def test_row_score_agrees_bit_for_bit_with_score() -> None:
    f = fleet(
        scenario(
            clusters=[
                cluster(
                    "c",
                    node("g8", cpu=96, memory="512Gi", gpu=8),
                    node("g2", cpu=32, memory="128Gi", gpu=2),
                    node("plain", cpu=64, memory="256Gi"),
                    node("g8b", cpu=96, memory="512Gi", gpu=8),
                )
            ],
            jobs=[
                job("cpu", cpu=4, memory="16Gi"),
                job("frac", cpu=2, memory="8Gi", gpu=0.3),
                job("one", cpu=8, memory="32Gi", gpu=1),
                job("four", cpu=16, memory="64Gi", gpu=4),
            ],
        )
    )
    c = f.cluster()
    _hold(c, 0, 20, ((0, 0.3), (1, 1.0), (5, 0.7)))
    _hold(c, 1, 30, ((1, 0.6),))
    cycle = _cycle(
        MixType(300, 2.0, 8 * GI, 7), MixType(1000, 8.0, 32 * GI, 11), MixType(4000, 16.0, 0, 3)
    )
    for name in ("cpu", "frac", "one", "four"):
        j = f.job(name)
        full = SCORE.score(ScoreInput(j, j.tasks[0], c, np.arange(4, dtype=np.intp), cycle))
        row = SCORE.row_score(FilterInput(j, j.tasks[0], c, cycle))
        for index in range(4):
            assert np.float64(row(index)).tobytes() == full[index].tobytes(), (name, index)
        assert all(0.0 <= value <= 1.0 for value in full)


def test_the_mix_groups_gpu_requests_by_amount_with_median_cpu_and_a_whole_gpu_prior() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("n", cpu=8))],
            jobs=[
                job("a", cpu=2, gpu=0.5),
                job("b", cpu=4, gpu=0.5),
                job("c", cpu=8, gpu=0.5),
                job("d", cpu=16, gpu=2),
                job("e", cpu=1),
            ],
        )
    )
    space = f.cluster().nodes.space
    # A job met twice (jobs built alike share their tasks) counts twice.
    jobs = [f.job(name) for name in "abcdea"]
    mix = mix_of(jobs, space.index["cpu"], space.index.get("memory"))
    # One-GPU requests are always in the mix (a prior of one tenth, at least one).
    assert [(kind.gpu_milli, kind.cpu, kind.count) for kind in mix.types] == [
        (500, 4.0, 4),
        (1000, 0.0, 1),
        (2000, 16.0, 1),
    ]


def test_the_gpu_packing_profile_is_row_local_and_uses_the_score() -> None:
    framework = Framework.from_profile("gpu-packing")
    names = [plugin.name for plugin in framework.scores]
    assert "gpu-fragmentation" in names and "binpack" not in names
    assert framework.row_local


def test_every_whole_gpu_amount_stays_in_the_mix_however_rare() -> None:
    """Issue 38: the mix kept the 8 most frequent GPU amounts, so on a trace of many fractions
    a rare 8-GPU request fell out of it and breaking a free 8-GPU node looked free. Fractions
    are still cut to the ``MIX_TYPES`` most frequent; whole amounts (one computation for all
    of them) are all kept."""
    fractions = [round((step + 1) / (MIX_TYPES + 2), 3) for step in range(MIX_TYPES + 1)]
    jobs = [job(f"f{i}", cpu=1, gpu=amount) for i, amount in enumerate(fractions)]
    jobs.append(job("eight", cpu=64, gpu=8))
    f = fleet(scenario(clusters=[cluster("c", node("n", cpu=8))], jobs=jobs))
    space = f.cluster().nodes.space
    sample = [f.job(f"f{i}") for i in range(len(fractions)) for _ in range(1 + i % 2)]
    sample.append(f.job("eight"))
    mix = mix_of(sample, space.index["cpu"], space.index.get("memory"))
    amounts = [kind.gpu_milli for kind in mix.types]
    assert 8000 in amounts
    assert len([amount for amount in amounts if amount < 1000]) == MIX_TYPES
