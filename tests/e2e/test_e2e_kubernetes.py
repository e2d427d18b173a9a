"""``flotilla up --fleet`` with a ``kubernetes`` cluster, end to end, with real processes.

The cluster is the test double of a Kubernetes control plane (tests/backends/engines: real
HTTP, the real REST paths, a Job controller and a kubelet that runs each pod as a local
process), running in this test's process; Flotilla reaches it through a kubeconfig as it would
a real one. A job, a failing job, a two-replica gang, a cancel, a ``max_runtime`` end, their
logs (through the API and ``flotilla logs``), and a ``kill -9`` of Flotilla with a restart that
adopts every run from the API server alone: none lost, none dispatched twice.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backends.engines.fake_kube_apiserver import FakeApiServer
from tests.e2e.service import FLOTILLA, Server, Services, wait_for
from tests.timing import limit

LIMIT = 120.0
"""Seconds a job may take to reach a state on the reference machine (``tests/timing.py``
stretches it on a loaded one)."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeApiServer]:
    # A container's exit shows a second later, as on a real kubelet (2-4 s): the window in
    # which Flotilla reads a deleted pod's last output before the pod goes.
    server = FakeApiServer(status_delay=1.0)
    server.cluster.add_node("node-a", cpu="8", memory="32Gi")
    server.cluster.add_node("node-b", cpu="8", memory="32Gi")
    try:
        yield server
    finally:
        server.close()


def start(services: Services, tmp_path: Path, cluster: FakeApiServer) -> Server:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        yaml.safe_dump(
            {
                "name": "kube-e2e",
                "settings": {"cycle_interval": 0.2, "assignment_strategy": "resource-aware"},
                "clusters": [
                    {
                        "name": "k8s",
                        "backend": "kubernetes",
                        "settings": {
                            "kubeconfig": str(cluster.kubeconfig(tmp_path / "kubeconfig")),
                            "grace_period": 2,
                            "watch_timeout": 5,
                        },
                    }
                ],
                "queues": [{"name": "default"}],
            }
        )
    )
    return services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "local",
        extra=["--fleet", str(fleet)],
    )


def job(name: str, command: str, replicas: int = 1, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "default",
        "tasks": [
            {"name": "main", "replicas": replicas, "resources": {"cpu": 0.5, "memory": "64Mi"}}
        ],
        "payload": {"command": command},
        **fields,
    }


def describe(cluster: FakeApiServer) -> str:
    """The fake cluster's Jobs (conditions) and pods (phase, process), for a failed wait."""
    with cluster.cluster.lock:
        lines = [
            f"Job {item['metadata']['name']}: "
            + str([c["type"] for c in item.get("status", {}).get("conditions", [])])
            for item in cluster.cluster.list("Job")
        ]
        for pod in cluster.cluster.list("Pod"):
            meta = pod["metadata"]
            process = cluster.cluster.processes.get((meta["namespace"], meta["name"]))
            code = None if process is None else process.popen.poll()
            lines.append(
                f"Pod {meta['name']}: {pod['status'].get('phase')} on "
                f"{pod['spec'].get('nodeName')}, deleting={bool(meta.get('deletionTimestamp'))}"
                f", process={'none' if process is None else code}"
            )
        lines.append(f"resourceVersion {cluster.cluster.version}")
    return "the fake cluster:\n" + "\n".join(lines)


def chunk(server: Server, job_id: str, **params: Any) -> dict[str, Any]:
    response = server.http.get(f"/v1/jobs/{job_id}/logs", params=params)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def test_jobs_on_kubernetes_succeed_fail_gang_are_cancelled_time_out_and_show_logs(
    services: Services, cluster: FakeApiServer, tmp_path: Path
) -> None:
    server = start(services, tmp_path, cluster)
    assert "cluster k8s (kubernetes): 2 nodes" in server.log.read_text()
    ok, bad, gang, long, late = server.submit(
        job("ok", "echo hello-from-a-pod; echo 'kept=$(FLOTILLA_RUN)'; echo on-stderr >&2"),
        job("bad", "echo failing; exit 3"),
        job("gang", 'echo "rank=$RANK of $WORLD_SIZE via $MASTER_ADDR"', replicas=2),
        job("long", "echo before-cancel; sleep 300"),
        job("late", "echo before-deadline; sleep 300", max_runtime=1),
    )
    states = server.wait_states(
        [ok, bad, gang, late], limit=LIMIT, context=lambda: describe(cluster)
    )
    assert states == {ok: "succeeded", bad: "failed", gang: "succeeded", late: "failed"}

    assert server.logs(ok) == "hello-from-a-pod\nkept=$(FLOTILLA_RUN)\non-stderr\n"
    [failed_run] = server.job(bad)["runs"]
    assert failed_run["exit_code"] == 3 and "exited with code 3" in failed_run["message"]
    assert "failing" in server.logs(bad)
    for replica in (0, 1):
        text = chunk(server, gang, replica=replica)["data"]
        assert text.startswith(f"rank={replica} of 2 via fl-"), text
    assert cluster.cluster.list("Service"), "the gang's headless Service (MASTER_ADDR)"
    [late_run] = server.job(late)["runs"]
    assert "exceeded max_runtime of 1s" in late_run["message"]
    # Charged for the second it ran (its pods are gone: the Job's start and its Failed time).
    ran = datetime.fromisoformat(late_run["finished_at"]) - datetime.fromisoformat(
        late_run["started_at"]
    )
    assert ran.total_seconds() >= 0.9, late_run
    assert "before-deadline" in server.logs(late)  # its pod was deleted: the kept output

    server.wait_states([long], frozenset({"running"}), limit=LIMIT)
    wait_for(lambda: "before-cancel" in chunk(server, long)["data"], LIMIT, "output")
    server.cancel(long)
    assert server.wait_states([long], limit=LIMIT) == {long: "cancelled"}
    assert "before-cancel" in server.logs(long)
    wait_for(
        lambda: all(p.popen.poll() is not None for p in cluster.cluster.processes.values()),
        LIMIT,
        "every pod's process to end",
    )

    # `flotilla logs` prints the container's log once, though both streams return it.
    printed = subprocess.run(
        [str(FLOTILLA), "logs", ok, "--server", server.url],
        capture_output=True,
        text=True,
        timeout=limit(LIMIT),
        check=True,
    )
    assert printed.stdout + printed.stderr == "hello-from-a-pod\nkept=$(FLOTILLA_RUN)\non-stderr\n"

    runs = [server.job(job_id)["runs"] for job_id in (ok, bad, gang, long, late)]
    assert all(len(found) == 1 for found in runs), runs  # nothing dispatched twice
    jobs = cluster.cluster.list("Job")
    assert len(jobs) == 4  # the cancelled run's Job was deleted; the others stay


def test_kill9_of_flotilla_loses_and_repeats_no_run_on_kubernetes(
    services: Services, cluster: FakeApiServer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    waiting = f"while [ ! -e '{gate}' ]; do sleep 0.05; done; echo finished-$FLOTILLA_RUN"
    first = start(services, tmp_path, cluster)
    ids = first.submit(
        job("gated-0", waiting), job("gated-1", waiting), job("gated-gang", waiting, replicas=2)
    )
    ids += first.submit(job("doomed", "sleep 300"))
    first.wait_states(ids, frozenset({"running"}), limit=LIMIT, context=lambda: describe(cluster))
    first.kill9()  # the pods keep running on the cluster

    second = start(services, tmp_path, cluster)
    assert all(second.state(job_id) == "running" for job_id in ids)
    second.cancel(ids[-1])
    gate.touch()
    states = second.wait_states(ids, limit=LIMIT, context=lambda: describe(cluster))
    assert states == {**dict.fromkeys(ids[:-1], "succeeded"), ids[-1]: "cancelled"}
    for job_id in ids:
        runs = second.job(job_id)["runs"]
        assert len(runs) == 1, runs  # adopted, never dispatched again
        if job_id != ids[-1]:
            assert f"finished-{runs[0]['id']}" in second.logs(job_id)
    jobs = cluster.cluster.list("Job")
    assert len(jobs) == len(ids) - 1  # one Job per run; the cancelled one deleted
    assert all(any(c["type"] == "Complete" for c in item["status"]["conditions"]) for item in jobs)


def test_gpu_jobs_tolerate_the_taint_clouds_put_on_gpu_nodes_and_cpu_jobs_stay_off(
    services: Services, tmp_path: Path
) -> None:
    """GKE taints GPU nodes ``nvidia.com/gpu=present:NoSchedule``: a GPU job runs there with
    no toleration of its own, its pod carries the toleration (as the ExtendedResourceToleration
    admission plugin adds it), and a CPU job is kept on the CPU node (issue 39)."""
    fake = FakeApiServer(status_delay=0.3)
    try:
        fake.cluster.add_node(
            "gpu-node",
            cpu="8",
            memory="32Gi",
            gpus=2,
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        )
        fake.cluster.add_node("cpu-node", cpu="8", memory="32Gi")
        server = start(services, tmp_path, fake)
        gpu_job = job("train", "echo on-gpu")
        gpu_job["tasks"][0]["resources"]["gpu"] = 1
        cpu_jobs = [job(f"prep-{index}", "echo on-cpu") for index in range(3)]
        [train, *preps] = server.submit(gpu_job, *cpu_jobs)
        states = server.wait_states([train, *preps], limit=LIMIT, context=lambda: describe(fake))
        assert set(states.values()) == {"succeeded"}, states
        nodes = {
            job_id: server.job(job_id)["run"]["assignment"]["placements"][0]["node"]
            for job_id in (train, *preps)
        }
        assert nodes.pop(train) == "gpu-node"
        assert set(nodes.values()) == {"cpu-node"}, nodes
        [pod_job] = [
            item
            for item in fake.cluster.list("Job")
            if item["spec"]["template"]["spec"].get("nodeName") == "gpu-node"
            or "gpu-node" in json.dumps(item["spec"]["template"])
        ]
        tolerations = pod_job["spec"]["template"]["spec"]["tolerations"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists"} in tolerations
    finally:
        fake.close()
