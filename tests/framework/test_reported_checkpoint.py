"""A run's reported checkpoint (``flotilla.checkpoint()``, issue 28) counts in the work a
preemption loses: GPU-seconds from the later of the reported and the declared checkpoint."""

from __future__ import annotations

from flotilla.framework.interfaces import Assignment, Placement
from flotilla.framework.jobs import SchedulingJob, build_job
from flotilla.framework.preemption import lost_work
from flotilla.framework.resources import ResourceSpace
from flotilla.framework.snapshot import RunningJob
from flotilla.model import JobSpec

SPACE = ResourceSpace(["cpu", "gpu"])


def gpu_job(gpus: int, checkpoint_every: float | None = None) -> SchedulingJob:
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "queue": "q",
            "tasks": [{"name": "main", "resources": {"cpu": 1, "gpu": gpus}}],
            **({"checkpoint_every": checkpoint_every} if checkpoint_every else {}),
        }
    )
    return build_job(
        spec, name="train", space=SPACE, sequence=0, submit_time=0, priority=0, preemptible=True
    )


def run(job: SchedulingJob, started: float, reported: float | None) -> RunningJob:
    placement = Placement(task="main", replica=0, node="n", row=0, request=job.total)
    return RunningJob(job, Assignment("c", (placement,)), started, reported)


def test_a_reported_checkpoint_is_where_the_lost_work_starts() -> None:
    """4 GPUs, started at 100, checkpointed at 900: at 1000 it loses 100 s, not 900 s."""
    assert lost_work(run(gpu_job(4), 100, 900), 1000) == 4 * 100
    assert lost_work(run(gpu_job(4), 100, None), 1000) == 4 * 900


def test_the_later_of_reported_and_declared_checkpoints_counts() -> None:
    """Declared every 300 s from 0 (last at 900); reported at 950 → 50 s lost at 1000; a
    report older than the declared one does not make the loss larger."""
    assert lost_work(run(gpu_job(2, 300), 0, 950), 1000) == 2 * 50
    assert lost_work(run(gpu_job(2, 300), 0, 400), 1000) == 2 * 100


def test_a_report_outside_the_run_is_held_within_it() -> None:
    """The job writes the file's time: one in the future loses nothing, one before the run
    started loses everything since the start."""
    assert lost_work(run(gpu_job(1), 100, 5000), 1000) == 0
    assert lost_work(run(gpu_job(1), 100, 10), 1000) == 900
