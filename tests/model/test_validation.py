"""Invalid scenarios raise ``SpecError`` with one ``path: problem`` line per problem.

The path names the field exactly as it is written in the file, indices included, so a user
can find it without reading the engine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flotilla.model import RetrySpec, SpecError
from flotilla.model.base import MAX_SECONDS
from tests.builders import (
    Data,
    cluster,
    job,
    jobs,
    load,
    node,
    nodes,
    queue,
    scenario,
    task,
)


def problems_of(data: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load(data)
    return caught.value.problems


def base(**kwargs: Any) -> Data:
    kwargs.setdefault("clusters", [cluster("c", nodes(2, cpu=4))])
    return scenario(**kwargs)


def with_field(data: Data, path: tuple[str | int, ...], value: Any) -> Data:
    target: Any = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return data


def test_a_valid_scenario_loads() -> None:
    spec = load(base(jobs=[jobs(n=3, cpu="500m", memory="1Gi")]))
    assert [j.job_names() for j in spec.jobs] == [["j-0", "j-1", "j-2"]]
    assert spec.jobs[0].tasks[0].resources == {"cpu": 0.5, "memory": 2**30}


def test_negative_resource_names_its_path() -> None:
    data = base(jobs=[job("a"), job("b"), job("c"), job("d", cpu=-1)])
    assert problems_of(data) == ["jobs[3].tasks[0].resources.cpu: must be >= 0"]


def test_malformed_quantity_names_its_path_and_shows_examples() -> None:
    (problem,) = problems_of(base(jobs=[job(memory="4GB")]))
    assert problem.startswith("jobs[0].tasks[0].resources.memory: '4GB' is not a quantity")


def test_node_resources_are_validated_too() -> None:
    data = scenario(clusters=[cluster("c", nodes(1, cpu=4), node("big", cpu=-8))])
    assert problems_of(data) == ["clusters[0].nodes[1].resources.cpu: must be >= 0"]


def test_every_problem_is_reported_not_only_the_first() -> None:
    data = base(jobs=[job("a", cpu=-1), job("b", memory="lots")])
    problems = problems_of(data)
    assert len(problems) == 2
    assert problems[0] == "jobs[0].tasks[0].resources.cpu: must be >= 0"
    assert problems[1].startswith("jobs[1].tasks[0].resources.memory:")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("bogus",), "bogus: unknown field"),
        (("settings", "turbo"), "settings.turbo: unknown field"),
        (("clusters", 0, "zone"), "clusters[0].zone: unknown field"),
        (("clusters", 0, "nodes", 0, "gpu"), "clusters[0].nodes[0].gpu: unknown field"),
        (("queues", 0, "priority"), "queues[0].priority: unknown field"),
        (("jobs", 0, "replicas"), "jobs[0].replicas: unknown field"),
        (("jobs", 0, "tasks", 0, "replica"), "jobs[0].tasks[0].replica: unknown field"),
    ],
)
def test_unknown_fields_are_errors(path: tuple[str | int, ...], expected: str) -> None:
    data = base(jobs=[job()], settings={"cycle_interval": 1})
    assert problems_of(with_field(data, path, 1)) == [expected]


def test_missing_required_fields_are_named() -> None:
    assert problems_of({"name": "x"}) == [
        "clusters: required field is missing",
        "queues: required field is missing",
    ]


def test_a_scenario_must_be_a_mapping() -> None:
    assert problems_of([1, 2]) == ["(top level): a scenario is a mapping of fields"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (base(jobs=[job(queue="nope")]), "jobs[0].queue: unknown queue 'nope'"),
        (
            base(jobs=[{**job(), "priority_class": "vip"}]),
            "jobs[0].priority_class: unknown priority class 'vip'",
        ),
        (
            base(queues=[{"name": "q", "quota": "team"}]),
            "queues[0].quota: unknown quota 'team'",
        ),
        (
            base(jobs=[job()], expect=[{"at": 0, "job": "zz", "state": "running"}]),
            "expect[0].job: unknown job 'zz'",
        ),
        (
            base(jobs=[job()], expect=[{"at": 0, "queue": "zz", "running": 1}]),
            "expect[0].queue: unknown queue 'zz'",
        ),
        (
            base(jobs=[job()], expect=[{"at": 0, "job": "j", "cluster": "zz"}]),
            "expect[0].cluster: unknown cluster 'zz'",
        ),
    ],
    ids=["queue", "priority-class", "quota", "expect-job", "expect-queue", "expect-cluster"],
)
def test_unknown_references_are_named(data: Data, expected: str) -> None:
    assert problems_of(data) == [expected]


def test_an_expectation_may_name_a_job_created_by_count() -> None:
    load(base(jobs=[jobs(n=2)], expect=[{"at": 0, "job": "j-1", "state": "running"}]))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            scenario(clusters=[cluster("c"), cluster("c")]),
            "clusters[1].name: duplicate cluster name 'c' (first at clusters[0].name)",
        ),
        (
            scenario(clusters=[cluster("c", nodes(2, name="n"), node("n-1"))]),
            "clusters[0].nodes[1].name: duplicate node name 'n-1' "
            "(first at clusters[0].nodes[0].name)",
        ),
        (
            base(queues=["q", "q"]),
            "queues[1].name: duplicate queue name 'q' (first at queues[0].name)",
        ),
        (
            base(jobs=[jobs("j", n=2), job("j-1")]),
            "jobs[1].name: duplicate job name 'j-1' (first at jobs[0].name)",
        ),
        (
            base(priority_classes=[{"name": "p", "value": 1}, {"name": "p", "value": 2}]),
            "priority_classes[1].name: duplicate priority class name 'p' "
            "(first at priority_classes[0].name)",
        ),
        (
            base(quotas=[{"name": "org", "children": [{"name": "org"}]}]),
            "quotas[0].children[0].name: duplicate quota name 'org' (first at quotas[0].name)",
        ),
    ],
    ids=["clusters", "nodes-after-count", "queues", "jobs-after-count", "classes", "quotas"],
)
def test_duplicate_names_are_errors(data: Data, expected: str) -> None:
    assert problems_of(data) == [expected]


def test_the_same_node_name_in_two_clusters_is_fine() -> None:
    load(scenario(clusters=[cluster("a", nodes(2)), cluster("b", nodes(2))]))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (base(queues=[queue("q", weight=0)]), "queues[0].weight: Input should be greater than 0"),
        (
            base(jobs=[job(submit_at=5, cancel_at=2)]),
            "jobs[0].cancel_at: is before submit_at (5)",
        ),
        (
            base(jobs=[job(gpu=1.5)]),
            "jobs[0].tasks[0]: resources.gpu: 1.5 is neither a share of one device (< 1) "
            "nor whole GPUs",
        ),
        (
            base(jobs=[job(tasks=[task("t"), task("t")])]),
            "jobs[0]: tasks: duplicate task name 't'",
        ),
        (
            scenario(
                clusters=[
                    cluster("c", {"name": "n", "resources": {"gpu": 4}, "gpus": {"count": 8}})
                ]
            ),
            "clusters[0].nodes[0]: resources.gpu (4) and gpus.count (8) disagree",
        ),
        (
            scenario(clusters=[cluster("c", nodes(1, gpu=6, numa_nodes=4))]),
            "clusters[0].nodes[0].gpus: numa_nodes: 4 does not divide count 6",
        ),
        (
            scenario(clusters=[cluster("c", cost={"cpu": -1})]),
            "clusters[0]: cost.cpu: must be >= 0",
        ),
        (
            base(jobs=[job(tolerations=[{"key": "k", "operator": "In"}])]),
            "jobs[0].tolerations[0].operator: String should match pattern '^(Equal|Exists)$'",
        ),
        (
            base(jobs=[job(), job(tasks=[task(replicas=0)])]),
            "jobs[1].tasks[0].replicas: Input should be greater than or equal to 1",
        ),
        (
            base(jobs=[job(cpu=float("nan"))]),
            "jobs[0].tasks[0].resources.cpu: must be finite",
        ),
        (
            base(
                jobs=[{**job(), "priority": 1, "priority_class": "p"}],
                priority_classes=[{"name": "p", "value": 1}],
            ),
            "jobs[0]: priority and priority_class: give one, not both",
        ),
        (
            base(jobs=[job()], expect=[{"at": 0, "job": "j", "queue": "q"}]),
            "expect[0]: name exactly one of job or queue",
        ),
        (
            base(jobs=[job()], expect=[{"at": 0, "job": "j", "running": 1}]),
            "expect[0]: running and queued are counts of a queue, not of a job",
        ),
        (
            scenario(clusters=[]),
            "clusters: List should have at least 1 item after validation, not 0",
        ),
    ],
    ids=[
        "queue-weight",
        "cancel-before-submit",
        "fractional-gpu-above-one",
        "duplicate-task",
        "gpu-count-disagrees",
        "numa-blocks",
        "negative-cost",
        "toleration-operator",
        "zero-replicas",
        "nan",
        "priority-twice",
        "expect-two-subjects",
        "expect-job-count",
        "no-clusters",
    ],
)
def test_field_rules(data: Data, expected: str) -> None:
    assert problems_of(data) == [expected]


def test_spec_error_message_lists_every_problem_under_the_source() -> None:
    error = SpecError(["a: x", "b: y"], "file.yaml")
    assert str(error) == "file.yaml: invalid scenario\n  a: x\n  b: y"


def test_dependencies_name_jobs_of_the_scenario_without_cycles() -> None:
    def needs(name: str, *jobs_needed: str, queue_name: str = "q") -> Data:
        return {**job(name, queue=queue_name), "depends_on": [{"job": j} for j in jobs_needed]}

    data = base(
        queues=[queue("q"), queue("r")],
        jobs=[
            needs("a", "c"),
            needs("b", "a"),
            needs("c", "b"),
            needs("d", "zz"),
            needs("e", "r/a"),
            needs("f", "j-1", queue_name="r"),
            jobs(n=2),
        ],
    )
    assert problems_of(data) == [
        "jobs[3].depends_on[0].job: unknown job 'zz'",
        "jobs[4].depends_on[0].job: unknown job 'r/a'",
        "jobs[0].depends_on: dependency cycle a → c → b → a",
    ]


def test_a_retry_delay_stored_before_delays_were_bounded_still_gives_a_date() -> None:
    """Issue 23: ``99999999999h`` overflowed ``now + delay`` inside the scheduling loop."""
    for backoff in ("fixed", "exponential"):
        stored = RetrySpec.model_construct(
            limit=1, backoff=backoff, delay=3.6e14, max_delay=3.6e14, on=[]
        )
        delay = stored.delay_after(3)
        assert delay == MAX_SECONDS
        assert datetime.now(UTC) + timedelta(seconds=delay) > datetime.now(UTC)


@pytest.mark.parametrize("asked", ["SIGKILL", "SIGSTOP", "SIGRTMIN", "SIGCHLD", "USR1"])
def test_a_preemption_signal_that_would_not_give_the_job_its_grace_is_refused(asked: str) -> None:
    # SIGKILL or SIGSTOP cannot be handled; SIGRTMIN is the local supervisors' kill word;
    # SIGCHLD is ignored by default: none of them tells a job to save its work.
    data = base(jobs=[{**job("j"), "preemption": {"grace": 30, "signal": asked}}])
    [problem] = problems_of(data)
    assert problem.startswith("jobs[0].preemption.signal: ")
    assert "SIGUSR1" in problem and asked in problem


def test_the_signals_a_job_may_ask_for_before_the_kill_load() -> None:
    for asked in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"):
        load(base(jobs=[{**job("j"), "preemption": {"grace": 30, "signal": asked}}]))


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            {"max_runing_jobs": 5},
            "queues[0].owners.limits.alice.max_runing_jobs: unknown field",
        ),
        ({"max_running_jobs": 0}, "queues[0].owners.limits.alice.max_running_jobs:"),
        ({"max_resources": {"cpu": "lots"}}, "queues[0].owners.limits.alice.max_resources.cpu:"),
        ({}, "queues[0].owners.limits.alice: names neither max_running_jobs nor max_resources"),
    ],
)
def test_an_owners_own_limits_are_checked_naming_the_field(override: Data, expected: str) -> None:
    data = base(
        queues=[{"name": "q", "owners": {"limits": {"alice": override}}}],
        jobs=[job("a")],
    )
    assert any(problem.startswith(expected) for problem in problems_of(data)), problems_of(data)
