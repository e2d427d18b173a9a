"""The Kubernetes objects a run becomes: names, labels, the Indexed Job, a Binding, a PodGroup.

Pure functions of the request and the backend's settings, so the same request always gives
the same manifest (idempotent dispatch, a fresh backend finding what an earlier one made).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flotilla.backends.common import rendezvous_env
from flotilla.backends.interface import DispatchRejected, DispatchRequest, ReplicaPlacement
from flotilla.model.payload import CommandPayload, ContainerPayload

MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_CLUSTER = "flotilla.io/cluster"
LABEL_RUN = "flotilla.io/run-id"
"""The run id when it is a valid label value, else the Job's name (also unique per run)."""
ANNOTATION_RUN_ID = "flotilla.io/run-id"
"""The exact run id (a label value cannot hold every run id)."""
ANNOTATION_JOB = "flotilla.io/job"
ANNOTATION_PLACEMENTS = "flotilla.io/placements"
ANNOTATION_DISPATCHED_AT = "flotilla.io/dispatched-at"
ANNOTATION_MAX_RUNTIME = "flotilla.io/max-runtime"
ANNOTATION_CANCEL_REASON = "flotilla.io/cancel-reason"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
"""Set by the Job controller on its pods: the Job's uid. Pods are selected by it, since a
Job of the same name (one still being deleted) may have pods with the same job-name label."""
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
CONTAINER = "main"
MODES = ("native", "kueue", "volcano")

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class JobSettings:
    """What the backend's settings say about every manifest it makes."""

    cluster: str
    namespace: str
    mode: str
    scheduler_name: str
    default_image: str
    grace_period: float
    gpu_resource: str
    queue_name: str | None
    volcano_queue: str
    image_pull_secrets: tuple[str, ...] = ()


def job_name(run_id: str) -> str:
    """The Job's name for a run: a DNS label, deterministic, unique per run id.

    A slug of the run id keeps it readable in ``kubectl get jobs``; the hash keeps it unique
    when the slug folds two ids together (case, ``_``, ``.``). Short enough (≤ 52) that the
    pods' hostnames ``<job>-<index>`` stay valid DNS labels.
    """
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")[:38].strip("-")
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"fl-{slug}-{digest}" if slug else f"fl-{digest}"


def label_value(text: str) -> str:
    """``text`` if it is a valid label value, else a deterministic valid stand-in."""
    if _LABEL_VALUE.match(text) and len(text) <= 63:
        return text
    return job_name(text)


def run_label(run_id: str) -> str:
    return label_value(run_id) if len(run_id) <= 63 else job_name(run_id)


def selector(cluster: str, run_id: str | None = None) -> str:
    """The label selector of this cluster's objects (of one run when ``run_id`` is given)."""
    terms = [f"{MANAGED_BY}=flotilla", f"{LABEL_CLUSTER}={label_value(cluster)}"]
    if run_id is not None:
        terms.append(f"{LABEL_RUN}={run_label(run_id)}")
    return ",".join(terms)


def cpu_quantity(cores: float) -> str:
    millicores = math.ceil(cores * 1000 - 1e-9)
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def largest_resources(request: DispatchRequest) -> dict[str, float]:
    """Per resource, the most any task of the run asks for (one pod template serves all)."""
    largest: dict[str, float] = {}
    tasks = {placement.task for placement in request.placements}
    for task, resources in request.resources.items():
        if task not in tasks:
            continue
        for name, amount in resources.items():
            largest[name] = max(largest.get(name, 0.0), float(amount))
    return largest


def container_resources(request: DispatchRequest, settings: JobSettings) -> dict[str, Any]:
    amounts = largest_resources(request)
    requests: dict[str, str] = {}
    gpus = amounts.pop("gpu", 0.0)
    if gpus and gpus != int(gpus):
        raise DispatchRejected(
            f"resources.gpu: {gpus:g} is a share of a device; Kubernetes hands out whole "
            f"{settings.gpu_resource} devices"
        )
    if amounts.get("cpu"):
        requests["cpu"] = cpu_quantity(amounts.pop("cpu"))
    else:
        amounts.pop("cpu", None)
    if amounts.get("memory"):
        requests["memory"] = str(math.ceil(amounts.pop("memory")))
    else:
        amounts.pop("memory", None)
    for name, amount in sorted(amounts.items()):
        if amount:
            requests[name] = str(math.ceil(amount)) if amount == int(amount) else f"{amount:g}"
    limits = dict(requests)
    if gpus:
        limits[settings.gpu_resource] = str(int(gpus))
        requests[settings.gpu_resource] = str(int(gpus))
    result: dict[str, Any] = {}
    if requests:
        result["requests"] = requests
    if limits:
        result["limits"] = limits
    return result


def tolerations(request: DispatchRequest) -> list[dict[str, str]]:
    made = []
    for index, item in enumerate(request.tolerations):
        toleration = {
            key: str(item[key]) for key in ("key", "operator", "value", "effect") if item.get(key)
        }
        if toleration.get("operator") == "Exists":
            toleration.pop("value", None)
        if toleration.get("operator", "Equal") == "Equal" and not toleration.get("key"):
            raise DispatchRejected(
                f"tolerations[{index}].key: an Equal toleration needs a key on Kubernetes"
            )
        made.append(toleration)
    return made


def user_labels(request: DispatchRequest) -> dict[str, str]:
    """The job's labels that Kubernetes accepts as labels (others stay in Flotilla)."""
    return {
        key: value
        for key, value in request.labels.items()
        if _LABEL_KEY.match(key) and _LABEL_VALUE.match(value) and len(value) <= 63
        if not key.startswith(("flotilla.io/", "kueue.x-k8s.io/", "batch.kubernetes.io/"))
    }


def environment(
    request: DispatchRequest, payload: CommandPayload | ContainerPayload
) -> list[dict[str, Any]]:
    """The env list: the request's, the rendezvous variables, then the payload's (the user's
    word), then Flotilla's own.

    Every pod has a container of its own, so ``LOCAL_RANK`` is 0 and ``RANK`` is the pod's
    completion index; ``MASTER_ADDR`` is replica 0's pod by its stable name
    (``<job>-0.<job>``: the pods' subdomain, resolved by the run's headless Service)."""
    name = job_name(request.run_id)
    rendezvous = rendezvous_env(request, request.placements[0], f"{name}-0.{name}")
    rendezvous.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    del rendezvous["RANK"]
    values = {**request.env, **rendezvous, **payload.env}
    values.update(
        {
            "FLOTILLA_JOB": request.job,
            "FLOTILLA_RUN": request.run_id,
            "FLOTILLA_REPLICAS": str(len(request.placements)),
            "FLOTILLA_PLACEMENTS": placements_json(request.placements),
        }
    )
    env: list[dict[str, Any]] = [
        {"name": name, "value": literal(value)} for name, value in values.items()
    ]
    env.append(
        {
            "name": "FLOTILLA_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
        }
    )
    env.append({"name": "FLOTILLA_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    if "RANK" not in payload.env:
        env.append(
            {
                "name": "RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}
                },
            }
        )
    return env


def literal(text: str) -> str:
    """``text`` as the kubelet will pass it on: it expands ``$(NAME)`` and turns ``$$`` into
    ``$`` in a container's command, args and env values, so every ``$`` is doubled and the
    process sees exactly what the user wrote (as on every other backend)."""
    return text.replace("$", "$$")


def placements_json(placements: Sequence[ReplicaPlacement]) -> str:
    return json.dumps(
        [[p.task, p.replica, p.node, list(p.gpu_ids)] for p in placements], separators=(",", ":")
    )


def placements_from_annotation(text: str) -> tuple[ReplicaPlacement, ...]:
    return tuple(
        ReplicaPlacement(str(task), int(replica), str(node), tuple(int(g) for g in gpus))
        for task, replica, node, gpus in json.loads(text)
    )


def container(
    request: DispatchRequest, payload: CommandPayload | ContainerPayload, settings: JobSettings
) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": CONTAINER}
    if isinstance(payload, ContainerPayload):
        spec["image"] = payload.image
        argv = payload.argv()
        if argv is not None:
            spec["command"] = [literal(part) for part in argv]
        if payload.args:
            spec["args"] = [literal(part) for part in payload.args]
        if payload.image_pull_policy:
            spec["imagePullPolicy"] = payload.image_pull_policy
    else:
        spec["image"] = settings.default_image
        spec["command"] = [literal(part) for part in payload.argv()]
    if payload.working_dir:
        spec["workingDir"] = payload.working_dir
    spec["env"] = environment(request, payload)
    resources = container_resources(request, settings)
    if resources:
        spec["resources"] = resources
    return spec


def job_manifest(
    request: DispatchRequest,
    payload: CommandPayload | ContainerPayload,
    settings: JobSettings,
    dispatched_at: float,
) -> dict[str, Any]:
    """The batch/v1 Job of a run: Indexed, one pod per placement, never retried."""
    name = job_name(request.run_id)
    replicas = len(request.placements)
    marker = {
        MANAGED_BY: "flotilla",
        LABEL_CLUSTER: label_value(settings.cluster),
        LABEL_RUN: run_label(request.run_id),
    }
    labels = {**user_labels(request), **marker}
    annotations = {
        ANNOTATION_RUN_ID: request.run_id,
        ANNOTATION_JOB: request.job,
        ANNOTATION_PLACEMENTS: placements_json(request.placements),
        ANNOTATION_DISPATCHED_AT: repr(dispatched_at),
    }
    pod_annotations: dict[str, str] = {ANNOTATION_RUN_ID: request.run_id}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": max(0, math.ceil(settings.grace_period)),
        "containers": [container(request, payload, settings)],
        # The pods are <job>-<index>.<job>: replica 0's name is the run's MASTER_ADDR.
        "subdomain": name,
    }
    found_tolerations = tolerations(request)
    if found_tolerations:
        pod_spec["tolerations"] = found_tolerations
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": item} for item in settings.image_pull_secrets]
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
        "backoffLimit": 0,
        "template": {
            "metadata": {"labels": dict(labels), "annotations": pod_annotations},
            "spec": pod_spec,
        },
    }
    if request.max_runtime is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(request.max_runtime))
        annotations[ANNOTATION_MAX_RUNTIME] = f"{request.max_runtime:g}"
    if settings.mode == "native":
        pod_spec["schedulerName"] = settings.scheduler_name
    elif settings.mode == "kueue":
        assert settings.queue_name is not None
        labels[KUEUE_QUEUE_LABEL] = settings.queue_name
        spec["suspend"] = True
    else:
        pod_spec["schedulerName"] = "volcano"
        pod_annotations[VOLCANO_GROUP_ANNOTATION] = name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def rendezvous_service_manifest(job: Mapping[str, Any], settings: JobSettings) -> dict[str, Any]:
    """The run's headless Service: it gives the Job's pods (``subdomain`` = the Job's name)
    the DNS names ``<job>-<index>.<job>``, so replica 0's is the run's ``MASTER_ADDR``.
    Owned by the Job, so deleting the Job deletes it."""
    meta = job["metadata"]
    name = meta["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": {MANAGED_BY: "flotilla", LABEL_RUN: meta["labels"][LABEL_RUN]},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": meta["uid"],
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME_LABEL: name},
        },
    }


def pod_group_manifest(job: Mapping[str, Any], settings: JobSettings) -> dict[str, Any]:
    """Volcano's gang: every replica of the Job or none (``minMember``), owned by the Job."""
    meta = job["metadata"]
    container_resources_ = job["spec"]["template"]["spec"]["containers"][0].get("resources", {})
    replicas = int(job["spec"]["completions"])
    spec: dict[str, Any] = {"minMember": replicas, "queue": settings.volcano_queue}
    requests = container_resources_.get("requests")
    if requests:
        spec["minResources"] = {name: _times(value, replicas) for name, value in requests.items()}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta["labels"]),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _times(quantity: str, count: int) -> str:
    if quantity.endswith("m"):
        return f"{int(quantity[:-1]) * count}m"
    return str(int(float(quantity) * count)) if quantity.isdigit() else quantity


def binding_manifest(pod: str, namespace: str, node: str) -> dict[str, Any]:
    """pods/binding: what a scheduler posts to put a pod on a node."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
