"""What a real API server showed about the kubernetes backend, each a test (issue 27): ``$`` in a
command reaches the container as written, a misspelt manifest field fails the dispatch naming
it, a cancelled or timed-out run keeps its last output, Volcano and Kueue modes without their
CRDs create nothing, and a run reads only its own Job's pods.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends import (
    BackendRunState,
    CancelOutcome,
    CancelRequest,
    DispatchRejected,
    LogsRequest,
    StatusRequest,
)
from flotilla.backends.kubernetes import manifests as m

from .kube_support import Manual, gpu_request, until
from .support import KubernetesHarness, LocalHarness, read_all, request

pytestmark = pytest.mark.skipif(
    os.environ.get("FLOTILLA_TEST_KUBECONFIG") is not None,
    reason="these tests drive the fake API server; the contract suite runs on a real cluster",
)

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
DOLLARS = (
    'echo "pid=$$" \'subst=$(FLOTILLA_RUN)\' \'twice=$$\' "home=$HOME" "env=$LITERAL" '
    '"$(echo shell)"'
)


def test_a_command_reaches_the_container_exactly_as_written(
    kube: KubernetesHarness, tmp_path: Path
) -> None:
    """The kubelet expands ``$(NAME)`` and ``$$`` in command, args and env values; the backend
    escapes them, so the shell gets the same text as on the local backend."""
    payload = {"command": DOLLARS, "env": {"HOME": "/home/u", "LITERAL": "a$(FLOTILLA_JOB)$$b"}}
    outputs = []
    (tmp_path / "local").mkdir()
    with LocalHarness(tmp_path / "local-state", tmp_path / "local") as local:
        for harness in (kube, local):
            backend = harness.make()
            backend.dispatch(request(backend, "run-1", payload))
            assert harness.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
            outputs.append(read_all(backend, "run-1").strip())
    on_kubernetes, on_local = outputs
    expected = (
        r"pid=\d+ subst=\$\(FLOTILLA_RUN\) twice=\$\$ home=/home/u env=a\$\(FLOTILLA_JOB\)\$\$b "
        r"shell"
    )
    assert re.fullmatch(expected, on_kubernetes), on_kubernetes
    assert re.sub(r"pid=\d+", "", on_kubernetes) == re.sub(r"pid=\d+", "", on_local)


def test_an_unknown_manifest_field_fails_the_dispatch_naming_it(
    manual: Manual, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real server drops an unknown field with a warning (201) unless the request says
    ``fieldValidation=Strict``: a manifest bug must fail here, not lose the field in
    production."""
    made = m.job_manifest

    def misspelt(*args: Any, **kwargs: Any) -> dict[str, Any]:
        manifest = made(*args, **kwargs)
        manifest["spec"]["template"]["spec"]["containers"][0]["comand"] = ["sh"]
        return manifest

    monkeypatch.setattr(m, "job_manifest", misspelt)
    backend = manual.backend()
    with pytest.raises(DispatchRejected) as error:
        backend.dispatch(gpu_request("run-1"))
    assert 'unknown field "spec.template.spec.containers[0].comand"' in str(error.value)
    assert manual.cluster.list("Job") == []
    # The client's models know that field is wrong; a field they know and the server does not
    # (a newer client, an older server) is refused by the server, as every create asks it to.
    monkeypatch.setattr(m, "job_manifest", made)
    backend.dispatch(gpu_request("run-2"))
    creates = [
        path.split("?")
        for method, path in manual.cluster.requests
        if method == "POST" and "/binding" not in path
    ]
    assert [(path.rsplit("/", 1)[1], query) for path, query in creates] == [
        ("jobs", "fieldValidation=Strict"),
        ("services", "fieldValidation=Strict"),
    ]


def test_a_cancelled_run_keeps_its_last_output(kube: KubernetesHarness) -> None:
    backend = kube.make()
    backend.dispatch(
        request(backend, "run-1", {"command": "echo working; while :; do sleep 0.05; done"})
    )
    kube.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    until(lambda: "working" in read_all(backend, "run-1"), "the run printed")
    result = backend.cancel(CancelRequest("run-1", reason="not needed", grace_period=1))
    assert result.outcome is CancelOutcome.STOPPING
    status = kube.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.CANCELLED
    kube.assert_gone(status)  # the pod, and with it its log on the cluster, is gone
    chunk = backend.logs(LogsRequest("run-1"))
    assert "working" in chunk.text and chunk.complete


def test_a_run_ended_by_max_runtime_keeps_its_last_output(kube: KubernetesHarness) -> None:
    """The Job controller deletes the pod at the deadline; the backend's watch sees it being
    deleted and reads its log while the kubelet stops it (a second here; 2-4 s for real)."""
    assert kube.fake is not None
    kube.fake.cluster.status_delay = 1.0
    backend = kube.make()
    backend.dispatch(request(backend, "run-1", {"command": "echo step-1; sleep 60"}, max_runtime=1))
    until(lambda: "step-1" in read_all(backend, "run-1"), "the run printed")
    status = kube.wait_terminal(backend, "run-1")
    assert (status.state, status.message) == (
        BackendRunState.FAILED,
        "exceeded max_runtime of 1s",
    )
    assert kube.fake is not None
    assert kube.fake.cluster.pods_of(m.job_name("run-1")) == []  # deleted by the Job controller
    assert "step-1" in read_all(backend, "run-1")
    # Issue 36: recorded as lasting 0 s (no pod left to date it), so timed-out runs were free
    # for fair share and usage; it ran until its deadline.
    assert status.started_at is not None and status.finished_at is not None
    assert status.finished_at - status.started_at >= 1.0
    # Issue 39: the replica the Job controller killed read "pending" in the finished run.
    assert [replica.state for replica in status.replicas] == [BackendRunState.FAILED]


@pytest.mark.parametrize(
    ("mode", "group", "settings"),
    [
        ("volcano", "scheduling.volcano.sh", {}),
        ("kueue", "kueue.x-k8s.io", {"queue_name": "team-a"}),
    ],
)
def test_a_mode_without_its_crds_refuses_the_dispatch_and_creates_nothing(
    manual: Manual, mode: str, group: str, settings: dict[str, str]
) -> None:
    manual.cluster.api_groups.discard(group)
    backend = manual.backend(mode=mode, **settings)
    with pytest.raises(DispatchRejected) as error:
        backend.dispatch(gpu_request("run-1"))
    message = str(error.value)
    assert "\n" not in message and group in message and "installed" in message
    for kind in ("Job", "Service", "PodGroup"):
        assert manual.cluster.list(kind) == []
    manual.cluster.api_groups.add(group)  # installed later: the next dispatch goes through
    backend.dispatch(gpu_request("run-1"))
    assert len(manual.cluster.list("Job")) == 1


def test_a_run_reads_only_the_pods_of_its_own_job(manual: Manual) -> None:
    """A pod with the run's job-name label but another Job's uid (a same-named Job still being
    deleted) is not the run's."""
    backend = manual.backend()
    backend.dispatch(gpu_request("run-1", replicas=1))
    name = m.job_name("run-1")
    (pod,) = until(lambda: manual.cluster.pods_of(name), "the pod is created")
    manual.cluster.set_running(pod)
    with manual.cluster.lock:
        stray = {
            **pod,
            "metadata": {
                **pod["metadata"],
                "name": f"{name}-0-stray",
                "uid": "another-pod",
                "creationTimestamp": "2999-01-01T00:00:00Z",
                "labels": {**pod["metadata"]["labels"], CONTROLLER_UID: "another-job"},
                "ownerReferences": [],
                "finalizers": [],
            },
            "status": dict(pod["status"]),
        }
        manual.cluster.put("Pod", stray, "ADDED")
        manual.cluster.terminate(stray, 1)
    status = backend.status(StatusRequest("run-1"))
    assert status.state is BackendRunState.RUNNING
    assert status.replicas[0].state is BackendRunState.RUNNING
    until(
        lambda: [s for s in backend.poll() if s.state is BackendRunState.RUNNING],
        "poll reports the run running",
    )


def test_a_failed_gangs_stopped_replicas_keep_their_last_output(kube: KubernetesHarness) -> None:
    """One replica fails; the Job controller deletes the others (with their grace period), and
    their output stays readable."""
    assert kube.fake is not None
    kube.fake.cluster.status_delay = 1.0
    backend = kube.make()
    script = (
        'echo "replica-$FLOTILLA_INDEX"; '
        'if [ "$FLOTILLA_INDEX" = 1 ]; then sleep 1; exit 3; fi; while :; do sleep 0.05; done'
    )
    backend.dispatch(request(backend, "run-1", {"command": script}, replicas=2))
    status = kube.wait_terminal(backend, "run-1")
    assert (status.state, status.exit_code) == (BackendRunState.FAILED, 3)
    assert status.message.startswith("replica main/1 exited with code 3")
    left = kube.fake.cluster.pods_of(m.job_name("run-1"))
    assert [pod["metadata"]["labels"][m.INDEX_LABEL] for pod in left] == ["1"]  # 0 was deleted
    assert backend.logs(LogsRequest("run-1", replica=0)).text == "replica-0\n"


def test_an_ended_pods_log_is_read_once_however_many_chunks_follow_it(
    kube: KubernetesHarness,
) -> None:
    """Issue 39: each 64 KiB chunk asked the API for the log's first offset+limit bytes (the
    log API has no offset): a 24 MB log took 25 s. An ended pod's log no longer changes."""
    assert kube.fake is not None
    backend = kube.make()
    line = "x" * 1023
    backend.dispatch(
        request(backend, "run-1", {"command": f"for i in $(seq 1024); do echo {line}; done"})
    )
    kube.wait_terminal(backend, "run-1")
    before = len([r for r in kube.fake.cluster.requests if r[1].split("?")[0].endswith("/log")])
    data, offset, complete = b"", 0, False
    while not complete:
        chunk = backend.logs(LogsRequest("run-1", offset=offset, limit=64 * 1024))
        data, offset, complete = data + chunk.data, chunk.next_offset, chunk.complete
    assert len(data) == 1024 * 1024 and data.count(b"\n") == 1024
    reads = (
        len([r for r in kube.fake.cluster.requests if r[1].split("?")[0].endswith("/log")]) - before
    )
    assert reads <= 2, f"{reads} log reads for 16 chunks"
