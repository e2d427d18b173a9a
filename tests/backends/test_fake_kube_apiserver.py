"""The fake API server answers as a real one (kube-apiserver and kube-controller-manager v1.36)
did, row by row of the table in issue 27: validation, defaults, patches, deletion, binding, logs,
watch expiry, Job conditions, a gang's failure, garbage collection and the order of timings.

These talk to the fake over plain HTTP, as the backend does, so a difference from the real
server that the backend could depend on fails here first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .engines.fake_kube_apiserver import FakeApiServer
from .kube_support import until

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"
SERVICES = "/api/v1/namespaces/default/services"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    made = FakeApiServer()
    made.cluster.add_node("node-a")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def manual() -> Iterator[FakeApiServer]:
    """The fake whose kubelet runs nothing, and no scheduler places (pods stay unbound)."""
    made = FakeApiServer(run_processes=False)
    made.cluster.add_node("node-a")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def http(server: FakeApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


def job(
    name: str,
    command: str = "true",
    *,
    completions: int | None = 1,
    grace: int = 30,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": completions or 1,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": grace,
                    "containers": [
                        {"name": "main", "image": "busybox", "command": ["sh", "-c", command]}
                    ],
                }
            },
            **spec,
        },
    }
    if completions is not None:
        body["spec"]["completions"] = completions
    return body


def pods_of(server: FakeApiServer, name: str) -> list[dict[str, Any]]:
    return server.cluster.list("Pod", "default", f"batch.kubernetes.io/job-name={name}")


def conditions(server: FakeApiServer, name: str) -> list[str]:
    found = server.cluster.get("Job", "default", name)
    assert found is not None
    return [c["type"] for c in found["status"].get("conditions", [])]


# --- validation ---


def test_an_unknown_field_is_dropped_with_a_warning_unless_strict(
    server: FakeApiServer, http: httpx.Client
) -> None:
    body = job("loose")
    body["spec"]["template"]["spec"]["containers"][0]["comand"] = ["sh"]
    created = http.post(JOBS, json=body)
    assert created.status_code == 201
    assert created.headers["Warning"] == (
        '299 - "unknown field \\"spec.template.spec.containers[0].comand\\""'
    )
    assert "comand" not in json.dumps(created.json())
    strict = http.post(
        JOBS, params={"fieldValidation": "Strict"}, json={**body, "metadata": {"name": "strict"}}
    )
    assert strict.status_code == 400
    assert 'unknown field "spec.template.spec.containers[0].comand"' in strict.json()["message"]
    assert server.cluster.get("Job", "default", "strict") is None


def test_an_indexed_job_without_completions_is_invalid(http: httpx.Client) -> None:
    refused = http.post(JOBS, json=job("no-count", completions=None))
    assert refused.status_code == 422
    assert "spec.completions: Required value" in refused.json()["message"]


def test_a_job_name_over_63_characters_is_invalid(http: httpx.Client) -> None:
    refused = http.post(JOBS, json=job("j" * 64))
    assert refused.status_code == 422
    assert "metadata.name" in refused.json()["message"]
    assert http.post(JOBS, json=job("j" * 63)).status_code == 201


# --- patches and deletion ---


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/merge-patch+json", {"metadata": {"annotations": {"a": "1"}}}),
        ("application/strategic-merge-patch+json", {"metadata": {"annotations": {"a": "1"}}}),
        (
            "application/json-patch+json",
            [{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}],
        ),
    ],
)
def test_merge_strategic_and_json_patches_are_applied(
    http: httpx.Client, content_type: str, body: Any
) -> None:
    http.post(JOBS, json=job("patched")).raise_for_status()
    answer = http.patch(
        f"{JOBS}/patched", content=json.dumps(body), headers={"Content-Type": content_type}
    )
    assert answer.status_code == 200
    assert answer.json()["metadata"]["annotations"] == {"a": "1"}


def merge(http: httpx.Client, name: str, body: dict[str, Any]) -> httpx.Response:
    return http.patch(
        f"{JOBS}/{name}",
        content=json.dumps(body),
        headers={"Content-Type": "application/merge-patch+json"},
    )


def test_an_indexed_job_grows_by_completions_and_parallelism_together(
    http: httpx.Client, server: FakeApiServer
) -> None:
    """Elastic Indexed Jobs (GA in 1.31): ``completions`` changes only in tandem with
    ``parallelism``; the controller then makes the new indexes' pods."""
    http.post(JOBS, json=job("elastic", "sleep 60", completions=2)).raise_for_status()
    until(lambda: len(pods_of(server, "elastic")) == 2, "two pods")
    alone = merge(http, "elastic", {"spec": {"completions": 4}})
    assert alone.status_code == 422
    assert alone.json()["message"] == (
        'Job.batch "elastic" is invalid: spec.completions: Invalid value: 4: can only be '
        "modified in tandem with spec.parallelism"
    )
    grown = merge(http, "elastic", {"spec": {"completions": 4, "parallelism": 4}})
    assert grown.status_code == 200
    assert (grown.json()["spec"]["completions"], grown.json()["spec"]["parallelism"]) == (4, 4)
    until(lambda: len(pods_of(server, "elastic")) == 4, "four pods")
    indexes = sorted(
        int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        for pod in pods_of(server, "elastic")
    )
    assert indexes == [0, 1, 2, 3]


def test_a_jobs_template_and_a_non_indexed_jobs_completions_are_immutable(
    http: httpx.Client,
) -> None:
    http.post(JOBS, json=job("fixed", "sleep 60", completions=2)).raise_for_status()
    template = merge(http, "fixed", {"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}})
    assert template.status_code == 422
    assert "spec.template: Invalid value: " in template.json()["message"]
    assert template.json()["message"].endswith(": field is immutable")
    plain = job("plain", "sleep 60", completions=2, completionMode="NonIndexed")
    http.post(JOBS, json=plain).raise_for_status()
    refused = merge(http, "plain", {"spec": {"completions": 3, "parallelism": 3}})
    assert refused.status_code == 422
    assert refused.json()["message"] == (
        'Job.batch "plain" is invalid: spec.completions: Invalid value: 3: field is immutable'
    )
    assert merge(http, "plain", {"spec": {"parallelism": 1}}).status_code == 200


def test_no_more_pods_are_active_than_parallelism(
    http: httpx.Client, server: FakeApiServer
) -> None:
    http.post(JOBS, json=job("narrow", "sleep 60", completions=3, parallelism=1)).raise_for_status()
    until(lambda: len(pods_of(server, "narrow")) == 1, "one pod")
    assert merge(http, "narrow", {"spec": {"parallelism": 3}}).status_code == 200
    until(lambda: len(pods_of(server, "narrow")) == 3, "three pods")


def test_an_unknown_propagation_policy_is_invalid(http: httpx.Client) -> None:
    http.post(JOBS, json=job("kept")).raise_for_status()
    refused = http.request("DELETE", f"{JOBS}/kept", json={"propagationPolicy": "Sideways"})
    assert refused.status_code == 422
    assert 'Unsupported value: "Sideways"' in refused.json()["message"]


def test_a_background_delete_answers_a_status_and_a_foreground_one_the_job(
    http: httpx.Client,
) -> None:
    for name in ("back", "front"):
        http.post(JOBS, json=job(name, "sleep 60")).raise_for_status()
    back = http.request("DELETE", f"{JOBS}/back", json={"propagationPolicy": "Background"})
    assert back.status_code == 200
    assert (back.json()["kind"], back.json()["status"]) == ("Status", "Success")
    assert back.json()["details"]["name"] == "back"
    front = http.request("DELETE", f"{JOBS}/front", json={"propagationPolicy": "Foreground"})
    assert front.json()["kind"] == "Job" and front.json()["metadata"]["deletionTimestamp"]


def test_deleting_a_job_collects_its_service_and_pod_group(
    server: FakeApiServer, http: httpx.Client
) -> None:
    created = http.post(JOBS, json=job("owner", "sleep 60")).json()
    owner = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "owner",
            "uid": created["metadata"]["uid"],
        }
    ]
    http.post(
        SERVICES,
        json={
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "owner", "ownerReferences": owner},
            "spec": {"clusterIP": "None"},
        },
    ).raise_for_status()
    http.post(
        PODGROUPS,
        json={
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "owner", "ownerReferences": owner},
            "spec": {"minMember": 1},
        },
    ).raise_for_status()
    until(lambda: pods_of(server, "owner"), "the pod is created")
    http.request("DELETE", f"{JOBS}/owner", json={"propagationPolicy": "Background"})
    until(
        lambda: not server.cluster.list("Service") and not server.cluster.list("PodGroup"),
        "the garbage collector removes the Service and the PodGroup",
    )
    until(lambda: not pods_of(server, "owner"), "and the pods")


# --- binding and logs ---


def test_binding_to_a_node_that_does_not_exist_is_accepted_and_the_pod_sits_there(
    manual: FakeApiServer,
) -> None:
    with httpx.Client(base_url=manual.url) as http:
        body = job("lost")
        body["spec"]["template"]["spec"]["schedulerName"] = "flotilla"
        http.post(JOBS, json=body).raise_for_status()
        (pod,) = until(lambda: pods_of(manual, "lost"), "the pod is created")
        name = pod["metadata"]["name"]
        bound = http.post(
            f"{PODS}/{name}/binding",
            json={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "no-such-node"},
            },
        )
        assert bound.status_code == 201
        time.sleep(0.2)
        pod = http.get(f"{PODS}/{name}").json()
        assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == ("no-such-node", "Pending")
        assert http.get(f"{PODS}/{name}/log").status_code == 404  # no kubelet to ask


def test_pod_logs_answer_as_the_kubelet_would(manual: FakeApiServer) -> None:
    with httpx.Client(base_url=manual.url) as http:
        body = job("logs")
        body["spec"]["template"]["spec"]["schedulerName"] = "flotilla"
        http.post(JOBS, json=body).raise_for_status()
        (pod,) = until(lambda: pods_of(manual, "logs"), "the pod is created")
        url = f"{PODS}/{pod['metadata']['name']}/log"
        assert http.get(url, params={"container": "main"}).status_code == 204  # unbound
        with manual.cluster.lock:
            pod["spec"]["nodeName"] = "node-a"
            manual.cluster.put("Pod", pod)
        creating = http.get(url, params={"container": "main"})
        assert creating.status_code == 400 and "ContainerCreating" in creating.json()["message"]
        assert http.get(url, params={"container": "sidecar"}).status_code == 400
        manual.cluster.set_running(pod)
        manual.cluster.append_log(pod, "one\ntwo\nthree\n")
        assert http.get(url, params={"container": "main"}).text == "one\ntwo\nthree\n"
        assert http.get(url, params={"tailLines": 2, "limitBytes": 4}).text == "two\n"


# --- watch ---


def test_a_watch_from_an_old_version_is_served_until_compaction_then_gone(
    server: FakeApiServer, http: httpx.Client
) -> None:
    start = http.get(JOBS).json()["metadata"]["resourceVersion"]
    for index in range(2100):  # more than the 2,000 events the fake used to keep
        server.cluster.put(
            "ConfigMap", {"metadata": {"name": f"c{index}", "namespace": "default"}}, "ADDED"
        )
    http.post(JOBS, json=job("seen")).raise_for_status()
    events = http.get(JOBS, params={"watch": "true", "resourceVersion": start, "timeoutSeconds": 1})
    first = json.loads(events.text.splitlines()[0])
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "seen")
    server.cluster.expire_history()  # etcd compacts
    gone = http.get(JOBS, params={"watch": "true", "resourceVersion": start, "timeoutSeconds": 1})
    error = json.loads(gone.text.splitlines()[0])
    assert error["type"] == "ERROR" and error["object"]["code"] == 410


# --- defaults ---


def test_a_job_gets_the_real_servers_defaults(http: httpx.Client) -> None:
    created = http.post(JOBS, json=job("defaults")).json()
    uid = created["metadata"]["uid"]
    spec = created["spec"]
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert spec["suspend"] is False
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/controller-uid"] == uid == labels["controller-uid"]
    assert labels["batch.kubernetes.io/job-name"] == "defaults" == labels["job-name"]


def test_a_pod_gets_the_tracking_finalizer_a_token_volume_and_its_index(
    server: FakeApiServer, http: httpx.Client
) -> None:
    http.post(JOBS, json=job("shaped", "sleep 60", completions=2)).raise_for_status()
    pods = until(lambda: len(pods_of(server, "shaped")) == 2 and pods_of(server, "shaped"), "pods")
    for pod in pods:
        assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
        (volume,) = pod["spec"]["volumes"]
        assert volume["name"].startswith("kube-api-access-") and "projected" in volume
        container = pod["spec"]["containers"][0]
        assert container["volumeMounts"][0]["mountPath"] == (
            "/var/run/secrets/kubernetes.io/serviceaccount"
        )
        index = {item["name"]: item for item in container["env"]}["JOB_COMPLETION_INDEX"]
        assert index["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['batch.kubernetes.io/job-completion-index']"
        )


# --- Job conditions, a gang's failure, timings ---


def test_a_job_ends_with_failure_target_first_then_failed_once_its_pods_end(
    server: FakeApiServer, http: httpx.Client
) -> None:
    http.post(
        JOBS,
        json=job(
            "late",
            "trap 'sleep 2; exit 1' TERM; while :; do sleep 0.05; done",
            activeDeadlineSeconds=1,
        ),
    ).raise_for_status()
    until(lambda: "FailureTarget" in conditions(server, "late"), "FailureTarget")
    assert "Failed" not in conditions(server, "late")
    assert [p for p in pods_of(server, "late") if p["status"]["phase"] == "Running"]
    until(lambda: "Failed" in conditions(server, "late"), "Failed")
    assert all(p["status"]["phase"] != "Running" for p in pods_of(server, "late"))
    http.post(JOBS, json=job("fine", "true")).raise_for_status()
    until(lambda: "Complete" in conditions(server, "fine"), "Complete")
    assert conditions(server, "fine") == ["SuccessCriteriaMet", "Complete"]


def test_a_gangs_failure_stops_the_other_replicas_with_their_grace_period(
    server: FakeApiServer, http: httpx.Client
) -> None:
    script = (
        'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then sleep 1; exit 3; fi; '
        "trap 'echo terminated; exit 0' TERM; while :; do sleep 0.05; done"
    )
    http.post(JOBS, json=job("gang", script, completions=2, grace=5)).raise_for_status()
    until(lambda: "FailureTarget" in conditions(server, "gang"), "the gang fails")
    deleted = [p for p in pods_of(server, "gang") if p["metadata"].get("deletionTimestamp")]
    assert deleted and deleted[0]["metadata"]["deletionGracePeriodSeconds"] == 5
    until(lambda: "Failed" in conditions(server, "gang"), "Failed after the replicas end")
    assert b"terminated" in server.cluster.logs[("default", deleted[0]["metadata"]["name"])]


def test_endings_take_time_in_the_real_order(server: FakeApiServer, http: httpx.Client) -> None:
    """Real: a cancel of ``sleep 60`` ends in ~2 s, ``max_runtime: 1`` in ~4 s. The fake's
    kubelet reports an exit after a delay too, so nothing ends at once, and a deadline ends
    its Job only after the deadline and that delay."""
    http.post(JOBS, json=job("cancelled", "sleep 60", grace=30)).raise_for_status()
    (pod,) = until(
        lambda: [p for p in pods_of(server, "cancelled") if p["status"]["phase"] == "Running"],
        "running",
    )
    began = time.monotonic()
    http.post(JOBS, json=job("deadline", "sleep 60", activeDeadlineSeconds=3)).raise_for_status()
    http.request("DELETE", f"{PODS}/{pod['metadata']['name']}", json={"gracePeriodSeconds": 30})
    until(lambda: not pods_of(server, "cancelled"), "the cancelled pod is gone")
    cancelled = time.monotonic() - began
    until(lambda: "Failed" in conditions(server, "deadline"), "the deadline ends the Job")
    deadline = time.monotonic() - began
    assert server.cluster.status_delay <= cancelled < 3 + server.cluster.status_delay <= deadline
