"""Submission through the API: dependencies resolved or refused naming the field, and jobs no
cluster of the fleet could ever hold refused with the reason unless held. SQLite and
PostgreSQL (``lifecycle_client``)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from flotilla.model import ClusterSpec
from flotilla.store import JobState, SqlStore
from tests.builders import cluster, nodes, task
from tests.server.api_support import spec, submit


def refused(client: TestClient, body: Any, status: int) -> list[str]:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == status, response.text
    problems: list[str] = response.json()["problems"]
    return problems


@pytest.fixture
def fleet(any_store: SqlStore) -> SqlStore:
    """Two clusters: 4 nodes of 8 GPUs (labelled), and 2 CPU-only nodes."""
    for data in (
        cluster("gpu", nodes(4, name="g", cpu=64, memory="512Gi", gpu=8, labels={"pool": "a100"})),
        cluster("cpu", nodes(2, name="c", cpu=32, memory="128Gi"), labels={"tier": "cheap"}),
    ):
        any_store.upsert_cluster(ClusterSpec.model_validate(data))
    return any_store


def test_a_batch_chain_is_stored_and_why_says_what_each_job_waits_for(
    lifecycle_client: TestClient,
) -> None:
    prep, train = submit(
        lifecycle_client,
        {"jobs": [spec("prep"), spec("train", depends_on=[{"job": "prep"}])]},
    )
    why = lifecycle_client.get(f"/v1/jobs/{train}/why").json()
    assert why["reason"] == f"waits for job team-a/prep ({prep[:8]}) to succeed (it is queued)"
    assert why["summary"].endswith(why["reason"])
    assert why["waiting_for"] == [
        {"job_id": prep, "job": "prep", "condition": "succeeded", "state": "queued"}
    ]
    assert lifecycle_client.get(f"/v1/jobs/{prep}/why").json()["waiting_for"] == []


def test_a_dependency_met_already_leaves_why_to_the_scheduler(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    [prep] = submit(lifecycle_client, spec("prep"))
    any_store.transition(prep, JobState.FAILED, "exit 1")
    [cleanup] = submit(
        lifecycle_client, spec("cleanup", depends_on=[{"job": "prep", "condition": "failed"}])
    )
    why = lifecycle_client.get(f"/v1/jobs/{cleanup}/why").json()
    assert why["waiting_for"] == [] and "waits for" not in why["reason"]


def test_unknown_dependencies_and_cycles_are_refused_naming_the_field(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    problems = refused(
        lifecycle_client,
        {
            "jobs": [
                spec("a", depends_on=[{"job": "b"}]),
                spec("b", depends_on=[{"job": "a", "condition": "finished"}]),
                spec("c", depends_on=[{"job": "team-b/a"}]),
            ]
        },
        400,
    )
    assert problems == [
        "jobs[2].depends_on[0].job: no job named 'a' in queue 'team-b'",
        "jobs[0].depends_on: dependency cycle a → b → a",
    ]
    bad_condition = refused(
        lifecycle_client, spec("d", depends_on=[{"job": "a", "condition": "done"}]), 422
    )
    assert [line.split(":")[0] for line in bad_condition] == ["depends_on[0].condition"]
    assert any_store.list_jobs().jobs == []


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"tasks": [task(cpu=8, gpu=16)]},
            "tasks[0].resources.gpu: 16 per replica, but the largest node of the fleet has 8",
        ),
        (
            {"tasks": [task(cpu=1, memory="1Ti")]},
            "tasks[0].resources.memory: 1Ti per replica, but the largest node of the fleet "
            "has 512Gi",
        ),
        (
            {
                "tasks": [task(cpu=8, gpu=1)],
                "affinity": {"clusters": {"required": {"tier": "cheap"}}},
            },
            "tasks[0].resources.gpu: 1 per replica, but the largest node of the fleet matching "
            "the job's affinity has 0",
        ),
        (
            {"affinity": {"nodes": {"required": {"pool": "h100"}}}},
            "affinity.nodes.required: no node of the fleet has pool=h100",
        ),
        (
            {"tasks": [task(replicas=5, cpu=8, gpu=8)]},
            "tasks[0].replicas: the job's 5 replicas run together on one cluster, and no "
            "cluster of the fleet can hold them all even when empty",
        ),
        (
            {
                "tasks": [task(cpu=40, gpu=0, memory="100Gi")],
                "affinity": {"clusters": {"required": {"tier": "cheap"}}},
            },
            "tasks[0].resources.cpu: 40 per replica, but the largest node of the fleet matching "
            "the job's affinity has 32",
        ),
    ],
)
def test_a_job_no_cluster_could_ever_hold_is_refused_with_the_reason(
    lifecycle_client: TestClient, fleet: SqlStore, fields: dict[str, Any], problem: str
) -> None:
    body = {"jobs": [spec("fine"), spec("unfit", **fields)]}
    response = lifecycle_client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["problems"] == [f"jobs[1].{problem}"]
    assert "hold_if_unfit" in response.json()["message"]
    assert fleet.list_jobs().jobs == []
    held = {"jobs": [spec("fine"), spec("unfit", hold_if_unfit=True, **fields)]}
    _, unfit = submit(lifecycle_client, held)
    assert fleet.get_job(unfit).state is JobState.QUEUED


def test_jobs_that_fit_a_cluster_of_the_fleet_are_accepted(
    lifecycle_client: TestClient, fleet: SqlStore
) -> None:
    fitting = [
        spec("gang", tasks=[task(replicas=4, cpu=64, gpu=8)]),
        spec(
            "labelled",
            tasks=[task(cpu=2, gpu=1)],
            affinity={"nodes": {"required": {"pool": "a100"}}},
        ),
        spec("many", tasks=[task("a", replicas=2, cpu=4), task("b", replicas=4, cpu=60, gpu=2)]),
    ]
    assert len(submit(lifecycle_client, {"jobs": fitting})) == 3


def test_a_job_only_a_simulated_cluster_could_hold_is_refused_unless_it_asks_for_it(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    """A simulated cluster beside a real one takes only jobs that ask for it (its runs do
    not execute): a job only it could hold is refused at submit, saying how to send it
    there, instead of waiting forever or "succeeding" without running."""
    for data in (
        cluster("here", nodes(1, name="h", cpu=2), labels={"site": "here"}),
        cluster(
            "gpu-sim",
            nodes(2, name="g", cpu=16, gpu=4),
            labels={"accelerator": "a100", "flotilla.io/simulated": "true"},
        ),
    ):
        any_store.upsert_cluster(ClusterSpec.model_validate(data))
    problems = refused(lifecycle_client, spec("big", tasks=[task(cpu=8)]), 422)
    assert problems == [
        "affinity.clusters.required: every cluster of the fleet that could take it is "
        "simulated (flotilla.io/simulated): its runs would not execute; require one of its "
        "labels to send it there"
    ]
    asked = spec(
        "big", tasks=[task(cpu=8)], affinity={"clusters": {"required": {"accelerator": "a100"}}}
    )
    submit(lifecycle_client, asked)
    submit(lifecycle_client, spec("small", tasks=[task(cpu=1)]))


def test_with_no_cluster_reported_yet_nothing_is_refused(lifecycle_client: TestClient) -> None:
    submit(lifecycle_client, spec("huge", tasks=[task(cpu=10_000, gpu=64)]))


def test_a_share_of_a_gpu_only_whole_device_clusters_could_hold_is_refused_at_submit(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    """Kubernetes hands out whole nvidia.com/gpu devices: a `gpu: 0.5` job that only a
    Kubernetes cluster could hold was accepted and then failed at dispatch (issue 39); it
    is refused at submit, naming the field and the clusters. With a cluster that shares
    devices beside it, it is taken (and placed there)."""
    kube = {
        **cluster("kube", nodes(2, cpu=8, gpu=4), labels={"engine": "kube"}),
        "backend": "kubernetes",
    }
    any_store.upsert_cluster(ClusterSpec.model_validate(kube))
    half = {"tasks": [task(cpu=1, gpu=0.5)]}
    problems = refused(lifecycle_client, spec("half", **half), 422)
    assert problems == [
        "tasks[0].resources.gpu: 0.5 is a share of a device, and every cluster it may run on "
        "with GPUs hands out whole devices only: kube (kubernetes). Ask for whole GPUs, or "
        "require a cluster whose backend shares them"
    ]
    submit(lifecycle_client, spec("whole", tasks=[task(cpu=1, gpu=1)]))
    box = {**cluster("box", nodes(1, cpu=8, gpu=2), labels={"engine": "local"}), "backend": "local"}
    any_store.upsert_cluster(ClusterSpec.model_validate(box))
    submit(lifecycle_client, spec("half", **half))


def test_a_non_strict_gang_that_could_never_grow_on_the_fleet_is_refused(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    """Slurm cannot add replicas to a running run: a gang that would start with min_member
    replicas there and never grow is refused, naming the clusters. Ray and Kubernetes can."""
    for data in (
        {**cluster("hpc", nodes(4, cpu=8), labels={"engine": "slurm"}), "backend": "slurm"},
        {**cluster("ray-pool", nodes(4, cpu=8), labels={"engine": "ray"}), "backend": "ray"},
        {**cluster("kube", nodes(4, cpu=8), labels={"engine": "kube"}), "backend": "kubernetes"},
        {**cluster("box", nodes(4, cpu=8), labels={"engine": "local"}), "backend": "local"},
    ):
        any_store.upsert_cluster(ClusterSpec.model_validate(data))
    elastic = {"tasks": [task(replicas=4, cpu=8)], "gang": {"mode": "non-strict", "min_member": 2}}
    pinned = spec("elastic", affinity={"clusters": {"required": {"engine": "slurm"}}}, **elastic)
    problems = refused(lifecycle_client, {"jobs": [spec("fine"), pinned]}, 422)
    assert len(problems) == 1 and problems[0].startswith("jobs[1].gang.mode: non-strict")
    assert "hpc (slurm)" in problems[0] and "(kubernetes, local, ray, sim)" in problems[0]
    assert any_store.list_jobs().jobs == []
    submit(lifecycle_client, spec("elastic", **elastic))  # box (local) can grow it
    for engine in ("ray", "kube"):  # so can Ray and Kubernetes clusters
        submit(
            lifecycle_client,
            spec(
                f"on-{engine}", affinity={"clusters": {"required": {"engine": engine}}}, **elastic
            ),
        )
    strict = {"tasks": [task(replicas=4, cpu=8)], "gang": {"mode": "strict"}}
    pinned_strict = spec(
        "whole", affinity={"clusters": {"required": {"engine": "slurm"}}}, **strict
    )
    submit(lifecycle_client, pinned_strict)


def test_a_non_strict_gang_whose_min_member_is_all_its_replicas_is_taken_where_none_can_grow(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    """min_member equal to the replicas starts every replica at once: such a gang never has
    to grow, so a fleet whose backends cannot add replicas (Slurm) takes it."""
    slurm = {**cluster("hpc", nodes(4, cpu=8)), "backend": "slurm"}
    any_store.upsert_cluster(ClusterSpec.model_validate(slurm))
    whole = {"tasks": [task(replicas=4, cpu=8)], "gang": {"mode": "non-strict", "min_member": 4}}
    [job] = submit(lifecycle_client, spec("whole", **whole))
    assert any_store.get_job(job).state is JobState.QUEUED
    smaller = {**whole, "gang": {"mode": "non-strict", "min_member": 3}}
    [problem] = refused(lifecycle_client, spec("elastic", **smaller), 422)
    assert problem.startswith("gang.mode: non-strict starts with min_member 3 of the job's 4")
