"""Engine jobs built from copies of one template spec share one shape, equal to the slow path."""

from __future__ import annotations

import numpy as np

from flotilla.framework.jobs import SchedulingJob, ShapeInterner, build_job
from flotilla.framework.resources import ResourceSpace
from flotilla.model import JobSpec

SPACE = ResourceSpace(["cpu", "memory", "gpu"])
SPEC = {
    "name": "job-0",
    "queue": "q",
    "submit_at": 5.0,
    "duration": 30.0,
    "tasks": [{"name": "worker", "replicas": 2, "resources": {"gpu": 8, "cpu": 32}}],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
}


def _build(spec: JobSpec, sequence: int, shapes: ShapeInterner | None) -> SchedulingJob:
    return build_job(
        spec,
        name=spec.name,
        space=SPACE,
        sequence=sequence,
        submit_time=spec.submit_at,
        priority=0,
        preemptible=True,
        shapes=shapes,
    )


def test_copies_of_a_template_share_its_shape_and_equal_a_validated_spec() -> None:
    template = JobSpec.model_validate(SPEC)
    copy = template.model_copy(update={"name": "job-1", "submit_at": 9.0, "duration": 1.0})
    validated = JobSpec.model_validate({**SPEC, "name": "job-1", "submit_at": 9.0, "duration": 1.0})
    shapes = ShapeInterner()
    first = _build(template, 0, shapes)
    fast, slow = _build(copy, 1, shapes), _build(validated, 1, shapes)
    assert fast.tasks is first.tasks and fast.placement_key is first.placement_key
    assert slow.tasks is not first.tasks
    assert slow.placement_key is first.placement_key  # equal keys are interned
    for field in ("name", "queue", "submit_time", "sequence", "expected_runtime", "placement_key"):
        assert getattr(fast, field) == getattr(slow, field)
    assert np.array_equal(fast.total, slow.total)
    assert fast.tolerations == slow.tolerations
    for ours, theirs in zip(fast.tasks, slow.tasks, strict=True):
        assert (ours.name, ours.replicas, ours.gpu, ours.resources) == (
            theirs.name,
            theirs.replicas,
            theirs.gpu,
            theirs.resources,
        )
        assert np.array_equal(ours.request, theirs.request)


def test_a_copy_with_other_tasks_gets_its_own_shape() -> None:
    template = JobSpec.model_validate(SPEC)
    other_tasks = JobSpec.model_validate(
        {**SPEC, "tasks": [{"name": "worker", "resources": {"cpu": 2}}]}
    ).tasks
    copy = template.model_copy(update={"tasks": other_tasks})
    shapes = ShapeInterner()
    built = _build(copy, 1, shapes)
    assert built.tasks[0].replicas == 1
    assert built.placement_key is not _build(template, 0, shapes).placement_key


def test_shapes_are_shared_only_through_the_interner_the_caller_injects() -> None:
    """No process-wide memo: two engines' interners share nothing, and jobs built without
    one are equal to interned ones but share no parts."""
    template = JobSpec.model_validate(SPEC)
    mine, theirs = ShapeInterner(), ShapeInterner()
    assert _build(template, 0, mine).tasks is _build(template, 1, mine).tasks
    assert _build(template, 0, mine).tasks is not _build(template, 0, theirs).tasks
    plain, again = _build(template, 0, None), _build(template, 0, None)
    assert plain.tasks is not again.tasks
    assert plain.placement_key == _build(template, 0, mine).placement_key
    assert len(mine) == 1 and len(theirs) == 1


def test_a_full_interner_starts_afresh_and_stays_correct() -> None:
    shapes = ShapeInterner(limit=1)
    specs = [
        JobSpec.model_validate({**SPEC, "tasks": [{"name": "w", "resources": {"cpu": cpu}}]})
        for cpu in (1, 2, 3, 4)
    ]
    built = [_build(spec, number, shapes) for number, spec in enumerate(specs)]
    assert [job.tasks[0].resources["cpu"] for job in built] == [1, 2, 3, 4]
    assert len(shapes) <= 2
