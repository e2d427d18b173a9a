"""Per-run GPU use read through NVML (a fake NVML, ``tests/backends/fake_nvml.py``): memory,
utilisation per process where NVML gives it and split (marked shared) where it does not,
MPS clients, GPU-hours held and used, and the ``monitor`` check of a run's memory against its
share."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence

import pytest

from flotilla.backends.local.gpu_sources import GpuDevice, GpuProcess, GpuUnavailable, NvmlSource
from flotilla.backends.local.gpu_telemetry import (
    DeviceShare,
    RunGpus,
    SampleRequest,
    run_pids,
    sample_gpus,
    shares_of,
)
from flotilla.model.gpu_use import GpuUse
from tests.backends.fake_nvml import FakeProcess, install

GIB = 2**30
MIB = 2**20
# a100-8-nvlink: pid 31337 holds 40950 MiB of device 0 (88 % busy); pids 31400 and 31401 hold
# 10240 and 10230 MiB of device 1 (35 % busy); no per-process utilisation there. h200-1: pid
# 48211 holds 60 GiB of the one H200.
TRAINER = RunGpus("trainer", frozenset({31337}), (DeviceShare(0, 1.0),))
HALF_A = RunGpus("half-a", frozenset({31400}), (DeviceShare(1, 0.5),))
HALF_B = RunGpus("half-b", frozenset({5000, 31401}), (DeviceShare(1, 0.5),))


def nvml(monkeypatch: pytest.MonkeyPatch, name: str) -> NvmlSource:
    install(monkeypatch, name)
    return NvmlSource()


def test_a_whole_device_run_is_credited_with_its_device_utilisation_and_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = nvml(monkeypatch, "a100-8-nvlink")
    first = sample_gpus(source, SampleRequest((TRAINER,), {}, now=100.0))
    second = sample_gpus(source, SampleRequest((TRAINER,), first.uses, now=110.0))
    use = second.uses["trainer"]
    assert use.memory_used == 40950 * MIB
    assert use.memory_peak == 40950 * MIB
    assert use.utilization == pytest.approx(88.0)
    assert use.held_gpu_seconds == pytest.approx(10.0)
    assert use.used_gpu_seconds == pytest.approx(8.8)
    assert use.efficiency == pytest.approx(0.88)
    assert use.samples == 2


def test_the_first_sample_counts_the_gpus_held_since_the_run_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run stopped at its first sample (a ``monitor`` stop) held its GPU until then: its
    GPU-seconds are not zero for having been sampled once."""
    source = nvml(monkeypatch, "a100-8-nvlink")
    started = RunGpus("trainer", frozenset({31337}), (DeviceShare(0, 1.0),), started_at=96.0)
    use = sample_gpus(source, SampleRequest((started,), {}, now=100.0)).uses["trainer"]
    assert use.samples == 1
    assert use.held_gpu_seconds == pytest.approx(4.0)
    assert use.used_gpu_seconds == pytest.approx(3.52)


def test_a_shared_device_splits_its_utilisation_by_the_memory_each_run_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = nvml(monkeypatch, "a100-8-nvlink")
    runs = (HALF_A, HALF_B)
    first = sample_gpus(source, SampleRequest(runs, {}, now=0.0))
    second = sample_gpus(source, SampleRequest(runs, first.uses, now=3600.0))
    a, b = second.uses["half-a"], second.uses["half-b"]
    total = 10240 + 10230
    # 35 % of the device, of which half-a's part is 10240/20470; as a percent of its half GPU.
    assert a.utilization == pytest.approx(35.0 * 10240 / total / 0.5)
    assert b.memory_used == 10230 * MIB
    assert a.held_gpu_seconds == pytest.approx(1800.0)  # half a GPU for an hour
    assert a.used_gpu_seconds + b.used_gpu_seconds == pytest.approx(0.35 * 3600)
    assert a.utilization_shared and b.utilization_shared  # the device's figure, split


def test_a_run_alone_on_its_device_has_the_devices_figure_not_marked_shared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = nvml(monkeypatch, "a100-8-nvlink")
    use = sample_gpus(source, SampleRequest((TRAINER,), {}, now=0.0)).uses["trainer"]
    assert use.utilization == pytest.approx(88.0)
    assert not use.utilization_shared


def test_where_nvml_gives_each_process_its_utilisation_a_run_gets_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two half-GPU runs on one H100 whose driver reports per-process SM utilisation: each
    gets what its processes used (30 % and 50 % of the device), not a split by memory
    (which would give the small one a fifth of 80 %), and nothing is marked shared."""
    fake = install(monkeypatch, "h100")
    fake.gpus[0].utilization = 80
    fake.gpus[0].processes = [
        FakeProcess(101, 4 * GIB, sm_util=30),
        FakeProcess(202, 16 * GIB, sm_util=50),
        FakeProcess(203, 0, sm_util=None),  # a worker of the second run that ran no kernel
    ]
    small = RunGpus("small", frozenset({101}), (DeviceShare(0, 0.5),))
    big = RunGpus("big", frozenset({202, 203}), (DeviceShare(0, 0.5),))
    uses = sample_gpus(NvmlSource(), SampleRequest((small, big), {}, now=0.0)).uses
    assert uses["small"].utilization == pytest.approx(60.0)  # 30 % of the device, of its half
    assert uses["big"].utilization == pytest.approx(100.0)
    assert uses["big"].memory_used == 16 * GIB
    assert not uses["small"].utilization_shared and not uses["big"].utilization_shared


def test_mps_clients_are_counted_not_only_the_mps_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under MPS the plain process list shows the MPS server; the clients, the runs' own
    processes, come from ``nvmlDeviceGetMPSComputeRunningProcesses``."""
    fake = install(monkeypatch, "h100")
    fake.gpus[0].utilization = 60
    fake.gpus[0].process_utilization = False
    fake.gpus[0].processes = [
        FakeProcess(900, 300 * 2**20),  # nvidia-cuda-mps-server
        FakeProcess(301, 6 * GIB, mps=True),
        FakeProcess(302, 2 * GIB, mps=True),
    ]
    one = RunGpus("one", frozenset({301}), (DeviceShare(0, 0.5, 8 * GIB),))
    two = RunGpus("two", frozenset({302}), (DeviceShare(0, 0.25, 1 * GIB),))
    sample = sample_gpus(NvmlSource(), SampleRequest((one, two), {}, now=0.0, monitor=True))
    assert sample.uses["one"].memory_used == 6 * GIB
    assert sample.uses["two"].memory_used == 2 * GIB
    assert sample.uses["one"].utilization_shared
    assert sample.over_share == {"two": "used 2Gi of GPU memory, its share is 1Gi"}
    assert "nvmlDeviceGetMPSComputeRunningProcesses" in fake.calls


def test_a_runs_processes_are_its_replicas_and_every_descendant_whatever_the_session() -> None:
    """Without cgroups: a torchrun-shaped tree, whose workers call ``setsid``, is the run's
    all the same (they stay its descendants); a process outside the tree is not."""
    launcher = subprocess.Popen(
        ["sh", "-c", "setsid sleep 30 & setsid sleep 30 & wait"], start_new_session=True
    )
    stranger = subprocess.Popen(["sleep", "30"])
    found: frozenset[int] = frozenset()
    try:
        deadline = time.monotonic() + 10
        while len(found := run_pids([launcher.pid], None)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(found) == 3, found
        assert launcher.pid in found and stranger.pid not in found
        assert run_pids([launcher.pid], [7, 8]) == frozenset({launcher.pid, 7, 8})
    finally:
        for child in found - {launcher.pid}:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        launcher.kill()
        stranger.kill()
        launcher.wait()
        stranger.wait()


def test_processes_of_other_runs_and_strangers_are_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = nvml(monkeypatch, "a100-8-nvlink")
    idle = RunGpus("idle", frozenset({777}), (DeviceShare(2, 1.0),))
    sample = sample_gpus(source, SampleRequest((idle,), {}, now=0.0))
    assert sample.uses["idle"].memory_used == 0
    assert sample.uses["idle"].utilization == 0.0
    assert sample.over_share == {}


def test_monitor_names_a_run_over_its_gpu_memory_share(monkeypatch: pytest.MonkeyPatch) -> None:
    # h200-1: pid 48211 holds 60 GiB of the one H200.
    run = RunGpus("greedy", frozenset({48211}), (DeviceShare(0, 0.25, memory=35 * GIB),))
    sample = sample_gpus(
        nvml(monkeypatch, "h200-1"), SampleRequest((run,), {}, now=0.0, monitor=True)
    )
    assert sample.over_share == {"greedy": "used 60Gi of GPU memory, its share is 35Gi"}


def test_monitor_takes_the_fraction_of_the_device_memory_when_no_gpu_memory_was_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quarter = RunGpus("quarter", frozenset({48211}), (DeviceShare(0, 0.25),))
    half = RunGpus("half", frozenset({48211}), (DeviceShare(0, 0.5),))
    source = nvml(monkeypatch, "h200-1")
    over = sample_gpus(source, SampleRequest((quarter,), {}, 0.0, monitor=True))
    assert over.over_share["quarter"].startswith("used 60Gi of GPU memory, its share is 35.")
    within = sample_gpus(source, SampleRequest((half,), {}, 0.0, monitor=True))
    assert within.over_share == {}
    watched_off = sample_gpus(source, SampleRequest((quarter,), {}, 0.0))
    assert watched_off.over_share == {}


def test_a_runs_replicas_on_one_device_share_its_memory_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two replicas of 0.25 GPU on the same H200 hold half of it: the run's 60Gi there is
    within its share (half the device's memory), and its GPU-seconds count half a GPU."""
    pair = shares_of([("w", (0,)), ("w", (0,))], {"w": {"gpu": 0.25}})
    run = RunGpus("pair", frozenset({48211}), pair)
    source = nvml(monkeypatch, "h200-1")
    sample = sample_gpus(source, SampleRequest((run,), {}, 0.0, monitor=True))
    assert sample.over_share == {}
    later = sample_gpus(source, SampleRequest((run,), sample.uses, 10.0))
    assert later.uses["pair"].held_gpu_seconds == pytest.approx(5.0)
    one = RunGpus(
        "one", frozenset({48211}), pair[:1]
    )  # a single 0.25 replica using as much is over
    alone = sample_gpus(source, SampleRequest((one,), {}, 0.0, monitor=True))
    assert alone.over_share["one"].startswith("used 60Gi of GPU memory, its share is 35.")


def test_a_whole_device_is_the_share_of_a_job_that_also_sets_gpu_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole = shares_of([("main", (0,))], {"main": {"gpu": 1, "gpu_memory": 35 * GIB}})
    run = RunGpus("whole", frozenset({48211}), whole)
    sample = sample_gpus(nvml(monkeypatch, "h200-1"), SampleRequest((run,), {}, 0.0, monitor=True))
    assert sample.over_share == {}


class Unreadable:
    def devices(self) -> Sequence[GpuDevice]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")

    def processes(self) -> Sequence[GpuProcess]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")

    def close(self) -> None:
        pass


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
