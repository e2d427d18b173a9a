"""What the kubernetes backend does beyond the shared contract: the manifests it sends (checked
against the real OpenAPI schema), binding, watches that survive a 410, the Kueue and Volcano
modes, cancel semantics, an unreachable API server, and whole jobs through a real
``SchedulingLoop`` over SQLite.

The API server is the fake in ``engines/fake_kube_apiserver.py`` (real HTTP, real paths); it
refuses a Job or Binding that does not validate against the Kubernetes 1.31 schema, and an
unknown field under the backend's ``fieldValidation=Strict``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes_validate
import pytest

from flotilla.backends import (
    BackendRunState,
    BackendUnavailable,
    CancelOutcome,
    CancelRequest,
    DispatchRejected,
    LogsRequest,
    LogStream,
    ReplicaPlacement,
    StatusRequest,
    UnknownRun,
)
from flotilla.backends.kubernetes import manifests as m
from flotilla.model import JobSpec
from flotilla.model.scenario import Mode
from flotilla.service.loop import SchedulingLoop
from flotilla.store import JobState, SqlStore
from tests.service_builders import loop_over
from tests.timing import wait_until

from .engines.fake_kube_apiserver import FakeApiServer
from .kube_support import Manual, gpu_request, make, only_job, until
from .support import WAIT_LIMIT, KubernetesHarness, read_all, request

pytestmark = pytest.mark.skipif(
    __import__("os").environ.get("FLOTILLA_TEST_KUBECONFIG") is not None,
    reason="these tests drive the fake API server's kubelet; the contract suite runs on a "
    "real cluster",
)


# --- manifests ---


def test_a_run_becomes_an_indexed_job_with_gpus_resources_labels_and_tolerations(
    manual: Manual,
) -> None:
    backend = manual.backend()
    backend.dispatch(gpu_request("run-7"))
    job = only_job(manual.cluster)
    spec = job["spec"]
    assert job["metadata"]["name"] == m.job_name("run-7")
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 0
    labels = job["metadata"]["labels"]
    assert labels[m.LABEL_RUN] == "run-7" and labels[m.LABEL_CLUSTER] == "gpu-cluster"
    assert labels["team"] == "a" and "not a valid key!" not in labels
    pod = spec["template"]["spec"]
    assert pod["schedulerName"] == "flotilla"
    assert pod["tolerations"] == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    container = pod["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert container["command"] == ["torchrun", "x.py"]
    assert container["resources"]["limits"] == {
        "cpu": "2500m",
        "memory": str(8 * 2**30),
        "nvidia.com/gpu": "1",
    }
    names = {item["name"] for item in container["env"]}
    assert {"FLOTILLA_RUN", "FLOTILLA_JOB", "FLOTILLA_INDEX", "FLOTILLA_PLACEMENTS"} <= names


def test_gang_pods_get_their_rank_and_replica_zeros_stable_name_as_rendezvous(
    manual: Manual,
) -> None:
    backend = manual.backend()
    backend.dispatch(gpu_request("run-8"))
    backend.dispatch(gpu_request("run-9", replicas=1))
    job = next(
        j for j in manual.cluster.list("Job") if j["metadata"]["name"] == m.job_name("run-8")
    )
    name = m.job_name("run-8")
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == name
    env = {item["name"]: item for item in pod["containers"][0]["env"]}
    values = {key: item.get("value") for key, item in env.items()}
    assert values["WORLD_SIZE"] == "2" and values["MASTER_ADDR"] == f"{name}-0.{name}"
    assert (values["LOCAL_RANK"], values["LOCAL_WORLD_SIZE"]) == ("0", "1")  # a pod each
    assert 20000 <= int(values["MASTER_PORT"]) < 32000
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        f"metadata.annotations['{m.INDEX_ANNOTATION}']"
    )
    (service,) = manual.cluster.list("Service")  # none for the single-replica run-9
    assert service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {m.JOB_NAME_LABEL: name}
    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]


@pytest.mark.parametrize("mode", ["native", "kueue", "volcano"])
def test_every_manifest_validates_against_the_kubernetes_schema(mode: str) -> None:
    settings = m.JobSettings(
        cluster="c",
        namespace="ml",
        mode=mode,
        scheduler_name="flotilla",
        default_image="python:3.12-slim",
        grace_period=30,
        gpu_resource="nvidia.com/gpu",
        queue_name="team-a" if mode == "kueue" else None,
        volcano_queue="default",
        image_pull_secrets=("registry",),
    )
    from flotilla.backends.common import any_payload_of

    req = gpu_request("A_Run.With-Odd_Chars" * 5, max_runtime=90.5)
    job = m.job_manifest(req, any_payload_of(req), settings, 1.0)
    kubernetes_validate.validate(job, "1.31", strict=True)
    kubernetes_validate.validate(m.binding_manifest("p", "ml", "gpu-1"), "1.31", strict=True)
    assert len(job["metadata"]["name"]) <= 52
    assert job["spec"]["activeDeadlineSeconds"] == 91
    if mode == "kueue":
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["labels"][m.KUEUE_QUEUE_LABEL] == "team-a"
        assert "schedulerName" not in job["spec"]["template"]["spec"]
    if mode == "volcano":
        assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano"
        group = m.pod_group_manifest({**job, "metadata": {**job["metadata"], "uid": "u"}}, settings)
        assert group["spec"]["minMember"] == 2
        assert group["spec"]["minResources"]["nvidia.com/gpu"] == "2"


def test_a_fractional_gpu_is_rejected_naming_the_field(manual: Manual) -> None:
    backend = manual.backend()
    bad = gpu_request("run-1")
    bad = type(bad)(**{**vars(bad), "resources": {"worker": {"gpu": 0.5}}})
    with pytest.raises(DispatchRejected, match=r"resources\.gpu"):
        backend.dispatch(bad)


def test_settings_are_checked_by_name(manual: Manual) -> None:
    with pytest.raises(ValueError, match="mode"):
        manual.backend(mode="slurm")
    with pytest.raises(ValueError, match="queue_name"):
        manual.backend(mode="kueue")
    with pytest.raises(TypeError, match="no_such_setting"):
        manual.backend(no_such_setting=1)


# --- binding, status, exit codes ---


def test_each_replica_is_bound_to_its_node_and_the_first_failure_fails_the_run(
    manual: Manual,
) -> None:
    backend = manual.backend()
    req = gpu_request("run-1")
    placements = (
        ReplicaPlacement("worker", 0, "gpu-1"),
        ReplicaPlacement("worker", 1, "cpu-1"),
    )
    backend.dispatch(type(req)(**{**vars(req), "placements": placements}))
    name = m.job_name("run-1")
    pods = until(
        lambda: (
            [p for p in manual.cluster.pods_of(name) if p["spec"].get("nodeName")][1:]
            and manual.cluster.pods_of(name)
        ),
        "both pods bound",
    )
    assert [pod["spec"]["nodeName"] for pod in pods] == ["gpu-1", "cpu-1"]
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.PENDING
    for pod in pods:
        manual.cluster.set_running(pod)
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.RUNNING
    manual.cluster.append_log(pods[1], "CUDA out of memory\n")
    manual.cluster.terminate(pods[1], 137, reason="OOMKilled")
    status = until(
        lambda: (s := backend.status(StatusRequest("run-1"))).state.terminal and s,
        "failed",
    )
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == 137
    assert status.message == "replica worker/1 exited with code 137 (OOMKilled)"
    assert "out of memory" in backend.logs(LogsRequest("run-1", task="worker", replica=1)).text


def test_a_watch_that_expires_is_listed_again_and_pods_are_still_bound(
    manual: Manual,
) -> None:
    backend = manual.backend(watch_timeout=1)
    backend.dispatch(gpu_request("first", replicas=1))
    until(
        lambda: [
            p for p in manual.cluster.pods_of(m.job_name("first")) if p["spec"].get("nodeName")
        ],
        "bound",
    )
    manual.cluster.expire_history()
    time.sleep(1.5)  # the watch times out and resumes from a version the server forgot
    backend.dispatch(gpu_request("second", replicas=1))
    pod = until(
        lambda: [
            p for p in manual.cluster.pods_of(m.job_name("second")) if p["spec"].get("nodeName")
        ],
        "bound after the resync",
    )[0]
    manual.cluster.set_running(pod)
    until(lambda: "second" in [s.run_id for s in backend.poll()], "poll sees the change")


def test_an_unreachable_api_server_is_one_clear_error_naming_the_address(tmp_path: Path) -> None:
    server = FakeApiServer(run_processes=False)
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    server.close()
    backend = make(kubeconfig, request_timeout=1.0)  # the constructor does not need the server
    try:
        with pytest.raises(BackendUnavailable, match=r"http://127\.0\.0\.1:\d+") as error:
            backend.inventory()
        assert "\n" not in str(error.value)
        assert "fake-token" not in str(error.value) + repr(backend)  # the kubeconfig's token
        with pytest.raises(BackendUnavailable):
            backend.status(StatusRequest("run-1"))
    finally:
        backend.close()


def test_a_server_error_is_unavailable_not_a_rejection(manual: Manual) -> None:
    backend = manual.backend()
    node = backend.inventory().nodes[0]
    assert node.name == "cpu-1" or node.gpu_count == 4
    manual.cluster.down = True
    with pytest.raises(BackendUnavailable, match="503"):
        backend.inventory()


def test_inventory_reads_allocatable_labels_taints_and_gpus(
    manual: Manual,
) -> None:
    backend = manual.backend()
    nodes = {node.name: node for node in backend.inventory().nodes}
    assert nodes["gpu-1"].gpu_count == 4 and nodes["gpu-1"].capacity["gpu"] == 4
    assert nodes["gpu-1"].capacity["memory"] == 64 * 2**30
    assert nodes["gpu-1"].labels["pool"] == "a100"
    assert [(t.key, t.effect.value) for t in nodes["cpu-1"].taints] == [("spot", "NoSchedule")]


def test_cpu_and_memory_of_other_tenants_pods_are_not_counted_free(
    manual: Manual,
) -> None:
    manual.cluster.put(
        "Pod",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "other"},
            "spec": {
                "nodeName": "gpu-1",
                "containers": [
                    {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "1500m"}}}
                ],
            },
            "status": {"phase": "Running"},
        },
        "ADDED",
    )
    nodes = {node.name: node for node in manual.backend().inventory().nodes}
    assert nodes["gpu-1"].capacity["cpu"] == 14.5
    assert nodes["cpu-1"].capacity["cpu"] == 4


# --- cancel ---


@pytest.mark.parametrize("propagation", ["Foreground", "Background"])
def test_cancel_deletes_the_job_with_its_propagation_and_the_pods_with_the_grace(
    kube: KubernetesHarness, propagation: str
) -> None:
    backend = kube.make(propagation=propagation, grace_period=30)
    backend.dispatch(request(backend, "run-1", kube.long()))
    kube.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    assert kube.fake is not None
    kube.fake.cluster.requests.clear()
    result = backend.cancel(CancelRequest("run-1", reason="preempted", grace_period=1))
    assert result.outcome is CancelOutcome.STOPPING
    calls = [(method, path.split("?")[0]) for method, path in kube.fake.cluster.requests]
    name = m.job_name("run-1")
    assert ("DELETE", f"/apis/batch/v1/namespaces/default/jobs/{name}") in calls
    assert any(method == "DELETE" and "/pods/" in path for method, path in calls)
    status = kube.wait_terminal(backend, "run-1")
    assert (status.state, status.message) == (BackendRunState.CANCELLED, "preempted")
    kube.assert_gone(status)
    until(lambda: kube.fake and kube.fake.cluster.get("Job", "default", name) is None, "Job gone")
    assert backend.cancel(CancelRequest("run-1")).outcome is CancelOutcome.ALREADY_FINISHED
    with pytest.raises(UnknownRun):
        kube.make().status(StatusRequest("run-1"))  # deleted: a fresh object cannot know it


# --- modes ---


def test_kueue_mode_leaves_the_job_suspended_until_kueue_admits_it(kube: KubernetesHarness) -> None:
    backend = kube.make(mode="kueue", queue_name="team-a")
    backend.dispatch(request(backend, "run-1", kube.quick(output="admitted")))
    assert kube.fake is not None
    job = kube.fake.cluster.get("Job", "default", m.job_name("run-1"))
    assert job is not None and job["spec"]["suspend"] is True
    time.sleep(0.2)
    status = backend.status(StatusRequest("run-1"))
    assert status.state is BackendRunState.PENDING and "suspended" in status.message
    assert kube.fake.cluster.pods_of(m.job_name("run-1")) == []
    # Kueue admits the workload: it unsuspends the Job (its pods then go to kube-scheduler).
    import httpx

    httpx.patch(
        f"{kube.fake.url}/apis/batch/v1/namespaces/default/jobs/{m.job_name('run-1')}",
        json={"spec": {"suspend": False}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    status = kube.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED
    assert "admitted" in read_all(backend, "run-1")


def test_volcano_mode_creates_a_pod_group_of_every_replica(kube: KubernetesHarness) -> None:
    backend = kube.make(mode="volcano", volcano_queue="research")
    backend.dispatch(request(backend, "run-1", kube.quick(), replicas=3))
    assert kube.fake is not None
    group = kube.fake.cluster.get("PodGroup", "default", m.job_name("run-1"))
    assert group is not None
    assert (group["spec"]["minMember"], group["spec"]["queue"]) == (3, "research")
    assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"
    status = kube.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED


def test_a_container_payload_runs_its_command_with_its_env(kube: KubernetesHarness) -> None:
    backend = kube.make()
    payload = {
        "image": "busybox:1.36",
        "command": "echo $GREETING-$FLOTILLA_INDEX",
        "env": {"GREETING": "hi"},
    }
    backend.dispatch(request(backend, "run-1", payload, job_type="container", replicas=2))
    status = kube.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED
    assert backend.logs(LogsRequest("run-1", replica=1)).text.strip() == "hi-1"


def test_the_container_log_is_served_once_as_stdout(kube: KubernetesHarness) -> None:
    """A container keeps one log of both streams: a reader of both (the SDK's default, the
    dashboard, ``flotilla logs``) must get each line once, not once per stream."""
    backend = kube.make()
    payload = {"command": "echo out-line; echo err-line >&2"}
    backend.dispatch(request(backend, "run-1", payload))
    assert kube.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    stdout = backend.logs(LogsRequest("run-1", stream=LogStream.STDOUT))
    stderr = backend.logs(LogsRequest("run-1", stream=LogStream.STDERR))
    assert sorted(stdout.text.splitlines()) == ["err-line", "out-line"]
    assert (stderr.data, stderr.next_offset, stderr.complete) == (b"", 0, True)


# --- end to end through the scheduling loop ---


class Service:
    """The service's loop over SQLite and the kubernetes backend over the fake API server."""

    def __init__(self, tmp_path: Path, kube: KubernetesHarness) -> None:
        self.kube = kube
        self.store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
        self.backend = kube.make(cluster="k8s")
        self.loop = self.new_loop()

    def new_loop(self) -> SchedulingLoop:
        """The loop the composition root builds over the store and the backend (the cluster
        recorded as the backend reports it, a ``default`` queue): a restarted ``up``."""
        return loop_over(
            self.store,
            {"k8s": self.backend},
            mode=Mode.SYNC,
            cycle_interval=0.05,
            replica="replica-a",
        )

    def submit(self, name: str, command: str) -> str:
        spec = JobSpec.model_validate(
            {
                "name": name,
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": 0.5, "memory": "64Mi"}}],
                "payload": {"command": ["sh", "-c", command]},
            }
        )
        return self.store.submit_jobs([spec])[0]

    def state(self, job_id: str) -> JobState:
        return self.store.get_job(job_id).state

    def cycle_until(self, done: Callable[[], bool]) -> None:
        wait_until(done, "the loop to get there", WAIT_LIMIT, 0.05, self.loop.cycle)


@pytest.fixture
def service(tmp_path: Path, kube: KubernetesHarness) -> Iterator[Service]:
    running = Service(tmp_path, kube)
    yield running
    running.loop.close()
    running.store.close()


def test_loop_runs_a_job_to_success_with_its_logs(service: Service) -> None:
    job = service.submit("hello", "echo hello from a pod")
    service.cycle_until(lambda: service.state(job) is JobState.SUCCEEDED)
    chunk = service.loop.logs(job, LogsRequest(run_id=""))
    assert b"hello from a pod" in chunk.data
    assert service.kube.fake is not None
    pod = service.kube.fake.cluster.list("Pod")[0]
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "500m",
        "memory": str(64 * 2**20),
    }


def test_loop_fails_a_job_with_its_exit_code(service: Service) -> None:
    job = service.submit("broken", "exit 3")
    service.cycle_until(lambda: service.state(job) is JobState.FAILED)
    assert service.store.runs(job)[-1].exit_code == 3


def test_loop_cancels_a_running_job(service: Service) -> None:
    job = service.submit("sleeper", "sleep 60")
    service.cycle_until(lambda: service.state(job) is JobState.RUNNING)
    service.store.cancel(job, "no longer needed")
    service.cycle_until(lambda: service.state(job) is JobState.CANCELLED)
    assert service.kube.fake is not None
    until(lambda: not service.kube.fake.cluster.list("Pod"), "the pod is gone")


def test_a_fresh_backend_and_loop_adopt_a_running_job(service: Service) -> None:
    gate = service.kube.scratch / "gate"
    job = service.submit("adoptee", f"while [ ! -e '{gate}' ]; do sleep 0.05; done; echo adopted")
    service.cycle_until(lambda: service.state(job) is JobState.RUNNING)
    service.loop.close()
    service.backend.close()  # the service dies; the pod keeps running on the cluster

    service.backend = service.kube.make(cluster="k8s")
    service.loop = service.new_loop()
    service.loop.cycle()
    assert service.state(job) is JobState.RUNNING
    gate.touch()
    service.cycle_until(lambda: service.state(job) is JobState.SUCCEEDED)
    assert b"adopted" in service.loop.logs(job, LogsRequest(run_id="")).data


DISPATCHER = """
import sys, time
from flotilla.backends import DispatchRequest, ReplicaPlacement
from flotilla.backends.kubernetes import KubernetesBackend
backend = KubernetesBackend(cluster="crashy", kubeconfig=sys.argv[1], watch_timeout=5)
backend.dispatch(DispatchRequest(
    run_id="survivor", job="job-a", cluster="crashy",
    placements=(ReplicaPlacement("main", 0, "node-b"),),
    payload={"command": "while [ ! -e " + sys.argv[2] + " ]; do sleep 0.05; done; echo lived"},
))
print("dispatched", flush=True)
time.sleep(60)
"""


def test_a_run_outlives_a_scheduler_killed_with_sigkill(kube: KubernetesHarness) -> None:
    import signal
    import subprocess
    import sys

    gate = kube.scratch / "gate"
    process = subprocess.Popen(
        [sys.executable, "-c", DISPATCHER, str(kube.kubeconfig), str(gate)],
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"dispatched"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()

    fresh = kube.make(cluster="crashy")
    assert [status.run_id for status in fresh.poll()] == ["survivor"]
    kube.wait(fresh, "survivor", lambda s: s.state is BackendRunState.RUNNING, "running")
    assert fresh.status(StatusRequest("survivor")).replicas[0].node == "node-b"
    gate.touch()
    assert kube.wait_terminal(fresh, "survivor").state is BackendRunState.SUCCEEDED
    assert "lived" in read_all(fresh, "survivor")


def test_a_pod_that_cannot_start_keeps_the_run_pending_with_the_reason(
    manual: Manual,
) -> None:
    backend = manual.backend()
    backend.dispatch(gpu_request("run-1", replicas=1))
    (pod,) = until(lambda: manual.cluster.pods_of(m.job_name("run-1")), "pod created")
    with manual.cluster.lock:
        pod["status"]["containerStatuses"] = [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "imageID": "",
                "state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}},
            }
        ]
        manual.cluster.put("Pod", pod)
    status = backend.status(StatusRequest("run-1"))
    assert status.state is BackendRunState.PENDING
    assert status.message == "ErrImagePull: manifest unknown"


def test_a_failed_job_seen_before_its_pods_end_waits_for_the_failing_replicas_exit_code(
    manual: Manual,
) -> None:
    """The Jobs' and the pods' watches are two streams: the Job may be seen ``Failed`` (which
    Kubernetes sets only once every pod has ended) while the failing pod is still seen
    running. The run stays running until the pod's end arrives, and then fails with the
    replica's exit code; it once failed at once as "job failed" with no exit code, for good."""
    import httpx

    backend = manual.backend()
    backend.dispatch(gpu_request("run-1", replicas=1))
    (pod,) = until(lambda: manual.cluster.pods_of(m.job_name("run-1")), "pod created")
    with manual.cluster.lock:
        pod["status"]["phase"] = "Running"
        manual.cluster.put("Pod", pod)
    until(
        lambda: backend.status(StatusRequest("run-1")).state is BackendRunState.RUNNING,
        "the run running",
    )
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    httpx.patch(
        f"{manual.server.url}/apis/batch/v1/namespaces/default/jobs/{m.job_name('run-1')}/status",
        json={"status": {"failed": 1, "conditions": [failed]}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    ending = until(
        lambda: (found := backend.status(StatusRequest("run-1"))).message and found,
        "the Job's failure seen",
    )
    assert (ending.state, ending.message) == (BackendRunState.RUNNING, "ending: the Job failed")

    with manual.cluster.lock:
        pod["status"]["phase"] = "Failed"
        pod["status"]["containerStatuses"] = [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "busybox",
                "imageID": "",
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
            }
        ]
        manual.cluster.put("Pod", pod)
    final = until(
        lambda: (found := backend.status(StatusRequest("run-1"))).state.terminal and found,
        "the run ended",
    )
    assert (final.state, final.exit_code) == (BackendRunState.FAILED, 3)
    assert "exited with code 3" in final.message


def test_a_job_failed_through_its_status_subresource_fails_the_run(
    manual: Manual,
) -> None:
    """Another controller (a PodFailurePolicy, an admin) may end a Job through /status."""
    import httpx

    backend = manual.backend()
    backend.dispatch(gpu_request("run-1", replicas=1))
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "PodFailurePolicy",
        "message": "container main exited with 42",
    }
    httpx.patch(
        f"{manual.server.url}/apis/batch/v1/namespaces/default/jobs/{m.job_name('run-1')}/status",
        json={"status": {"conditions": [failed]}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    status = backend.status(StatusRequest("run-1"))
    assert (status.state, status.message) == (
        BackendRunState.FAILED,
        "job failed: PodFailurePolicy",
    )
    assert "run-1" not in backend.inventory().active_runs


class _Logs:
    """The one call ``KeptOutput`` makes of the API: each pod's log by name."""

    def __init__(self, logs: dict[str, bytes]) -> None:
        self.logs = logs

    def pod_log(self, pod: str, limit_bytes: int, tail_lines: int | None = None) -> bytes:
        return self.logs[pod][:limit_bytes]


def _pod(name: str, job_uid: str, run_id: str, phase: str = "Running") -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "uid": f"pod-{name}",
            "labels": {m.CONTROLLER_UID_LABEL: job_uid, m.INDEX_LABEL: "0"},
            "annotations": {m.ANNOTATION_RUN_ID: run_id},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {"phase": phase},
    }


def test_kept_output_is_the_runs_own_jobs_not_a_same_named_one() -> None:
    """Issue 39: copies were kept by run and replica, so the terminating pod of an earlier
    Job of the same name showed as the new run's output."""
    from flotilla.backends.kubernetes.kept import KeptOutput

    kept = KeptOutput(_Logs({"old": b"old job's output\n", "new": b"new job's output\n"}))  # type: ignore[arg-type]
    kept.keep(_pod("old", "uid-old", "run-1"))
    kept.bind("run-1", "uid-new")  # the run's Job now
    assert kept.get("run-1", 0) is None
    kept.keep(_pod("new", "uid-new", "run-1", phase="Failed"))
    assert kept.get("run-1", 0) == b"new job's output\n"


def test_a_pod_deleted_outside_flotilla_fails_the_run_saying_so(kube: KubernetesHarness) -> None:
    """``kubectl delete pod`` (or an eviction, a drain): the Job controller counts the pod
    failed (BackoffLimitExceeded); the run's message says the pod was deleted outside
    Flotilla, not only "BackoffLimitExceeded" (issue 39, seen on a real kube-apiserver)."""
    backend = kube.make()
    backend.dispatch(request(backend, "run-1", kube.long()))
    kube.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    assert kube.fake is not None
    [pod] = [p for p in kube.fake.cluster.list("Pod")]
    with kube.fake.cluster.lock:
        kube.fake.cluster.delete_pod(pod, 1)
    status = kube.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert "deleted outside Flotilla" in status.message, status.message
