"""Per-run GPU use from recorded ``nvidia-smi -q -x`` outputs: memory, utilisation split
among the runs on a device, GPU-hours held and used, and the ``monitor`` check of a run's
memory against its share."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from flotilla.backends.local.gpu_sources import GpuDevice, GpuProcess, GpuUnavailable
from flotilla.backends.local.gpu_telemetry import (
    DeviceShare,
    RunGpus,
    SampleRequest,
    sample_gpus,
    shares_of,
)
from flotilla.model.gpu_use import GpuUse
from tests.backends.gpu_recordings import recorded

GIB = 2**30
MIB = 2**20
# a100-8-nvlink: pid 31337 holds 40950 MiB of device 0 (88 % busy); pids 31400 and 31401 hold
# 10240 and 10230 MiB of device 1 (35 % busy). Each pid leads its own process group, except
# 31401, a child in process group 5000 (a replica's command that started it).
GROUPS = {31337: 31337, 31400: 31400, 31401: 5000, 48211: 48211}

TRAINER = RunGpus("trainer", (31337,), (DeviceShare(0, 1.0),))
HALF_A = RunGpus("half-a", (31400,), (DeviceShare(1, 0.5),))
HALF_B = RunGpus("half-b", (5000,), (DeviceShare(1, 0.5),))


def test_a_whole_device_run_is_credited_with_its_device_utilisation_and_memory() -> None:
    source = recorded("a100-8-nvlink")
    first = sample_gpus(source, SampleRequest((TRAINER,), {}, now=100.0), GROUPS.get)
    second = sample_gpus(source, SampleRequest((TRAINER,), first.uses, now=110.0), GROUPS.get)
    use = second.uses["trainer"]
    assert use.memory_used == 40950 * MIB
    assert use.memory_peak == 40950 * MIB
    assert use.utilization == pytest.approx(88.0)
    assert use.held_gpu_seconds == pytest.approx(10.0)
    assert use.used_gpu_seconds == pytest.approx(8.8)
    assert use.efficiency == pytest.approx(0.88)
    assert use.samples == 2


def test_the_first_sample_counts_the_gpus_held_since_the_run_started() -> None:
    """A run stopped at its first sample (a ``monitor`` stop) held its GPU until then: its
    GPU-seconds are not zero for having been sampled once."""
    source = recorded("a100-8-nvlink")
    started = RunGpus("trainer", (31337,), (DeviceShare(0, 1.0),), started_at=96.0)
    use = sample_gpus(source, SampleRequest((started,), {}, now=100.0), GROUPS.get).uses["trainer"]
    assert use.samples == 1
    assert use.held_gpu_seconds == pytest.approx(4.0)
    assert use.used_gpu_seconds == pytest.approx(3.52)


def test_a_shared_device_splits_its_utilisation_by_the_memory_each_run_holds() -> None:
    source = recorded("a100-8-nvlink")
    runs = (HALF_A, HALF_B)
    first = sample_gpus(source, SampleRequest(runs, {}, now=0.0), GROUPS.get)
    second = sample_gpus(source, SampleRequest(runs, first.uses, now=3600.0), GROUPS.get)
    a, b = second.uses["half-a"], second.uses["half-b"]
    total = 10240 + 10230
    # 35 % of the device, of which half-a's part is 10240/20470; as a percent of its half GPU.
    assert a.utilization == pytest.approx(35.0 * 10240 / total / 0.5)
    assert b.memory_used == 10230 * MIB
    assert a.held_gpu_seconds == pytest.approx(1800.0)  # half a GPU for an hour
    assert a.used_gpu_seconds + b.used_gpu_seconds == pytest.approx(0.35 * 3600)


def test_processes_of_other_runs_and_strangers_are_not_counted() -> None:
    source = recorded("a100-8-nvlink")
    idle = RunGpus("idle", (777,), (DeviceShare(2, 1.0),))
    sample = sample_gpus(source, SampleRequest((idle,), {}, now=0.0), GROUPS.get)
    assert sample.uses["idle"].memory_used == 0
    assert sample.uses["idle"].utilization == 0.0
    assert sample.over_share == {}


def test_monitor_names_a_run_over_its_gpu_memory_share() -> None:
    # h200-1: pid 48211 holds 60 GiB of the one H200.
    run = RunGpus("greedy", (48211,), (DeviceShare(0, 0.25, memory=35 * GIB),))
    sample = sample_gpus(
        recorded("h200-1"), SampleRequest((run,), {}, now=0.0, monitor=True), GROUPS.get
    )
    assert sample.over_share == {"greedy": "used 60Gi of GPU memory, its share is 35Gi"}


def test_monitor_takes_the_fraction_of_the_device_memory_when_no_gpu_memory_was_asked() -> None:
    quarter = RunGpus("quarter", (48211,), (DeviceShare(0, 0.25),))
    half = RunGpus("half", (48211,), (DeviceShare(0, 0.5),))
    source = recorded("h200-1")
    over = sample_gpus(source, SampleRequest((quarter,), {}, 0.0, monitor=True), GROUPS.get)
    assert over.over_share["quarter"].startswith("used 60Gi of GPU memory, its share is 35.")
    within = sample_gpus(source, SampleRequest((half,), {}, 0.0, monitor=True), GROUPS.get)
    assert within.over_share == {}
    watched_off = sample_gpus(source, SampleRequest((quarter,), {}, 0.0), GROUPS.get)
    assert watched_off.over_share == {}


def test_a_runs_replicas_on_one_device_share_its_memory_together() -> None:
    """Two replicas of 0.25 GPU on the same H200 hold half of it: the run's 60Gi there is
    within its share (half the device's memory), and its GPU-seconds count half a GPU."""
    pair = shares_of([("w", (0,)), ("w", (0,))], {"w": {"gpu": 0.25}})
    run = RunGpus("pair", (48211,), pair)
    source = recorded("h200-1")
    sample = sample_gpus(source, SampleRequest((run,), {}, 0.0, monitor=True), GROUPS.get)
    assert sample.over_share == {}
    later = sample_gpus(source, SampleRequest((run,), sample.uses, 10.0), GROUPS.get)
    assert later.uses["pair"].held_gpu_seconds == pytest.approx(5.0)
    one = RunGpus("one", (48211,), pair[:1])  # a single 0.25 replica using as much is over
    alone = sample_gpus(source, SampleRequest((one,), {}, 0.0, monitor=True), GROUPS.get)
    assert alone.over_share["one"].startswith("used 60Gi of GPU memory, its share is 35.")


def test_a_whole_device_is_the_share_of_a_job_that_also_sets_gpu_memory() -> None:
    whole = shares_of([("main", (0,))], {"main": {"gpu": 1, "gpu_memory": 35 * GIB}})
    run = RunGpus("whole", (48211,), whole)
    sample = sample_gpus(
        recorded("h200-1"), SampleRequest((run,), {}, 0.0, monitor=True), GROUPS.get
    )
    assert sample.over_share == {}


class Unreadable:
    def devices(self) -> Sequence[GpuDevice]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")

    def processes(self) -> Sequence[GpuProcess]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")


def test_an_unreadable_source_keeps_what_was_measured_and_says_why() -> None:
    before = GpuUse(memory_used=5, memory_peak=7, sampled_at=1.0, samples=1)
    sample = sample_gpus(Unreadable(), SampleRequest((TRAINER,), {"trainer": before}, now=2.0))
    assert sample.uses == {"trainer": before}
    assert sample.error == "NVML did not start: Driver Not Loaded"


def test_a_use_survives_its_json_record() -> None:
    use = GpuUse(1, 2, 30.0, 4.0, 1.5, 9.0, 3)
    assert GpuUse.from_json(use.to_json()) == use


def test_shares_follow_the_tasks_requests() -> None:
    resources = {"a": {"gpu": 0.25, "gpu_memory": 10 * GIB}, "b": {"gpu": 2}}
    assert shares_of([("a", (0,)), ("b", (1, 2)), ("c", (3,))], resources) == (
        DeviceShare(0, 0.25, 10 * GIB),
        DeviceShare(1, 1.0),
        DeviceShare(2, 1.0),
        DeviceShare(3, 1.0),
    )
