"""A run's status read from its Job and pods; the cluster's nodes read from Node objects.

Pure functions of API objects: two backend objects looking at the same cluster compute equal
statuses, which is what makes adoption after a restart or a failover work.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from flotilla.backends.interface import BackendRunState, ReplicaStatus, RunStatus
from flotilla.backends.kubernetes import manifests as m
from flotilla.model.cluster import Taint, TaintEffect
from flotilla.model.node_info import NodeInfo
from flotilla.model.quantity import parse_quantity

Obj = Mapping[str, Any]


def timestamp(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def pods_by_index(pods: Iterable[Obj]) -> dict[int, Obj]:
    """The newest pod of each completion index."""
    chosen: dict[int, Obj] = {}
    for pod in pods:
        index = pod["metadata"].get("labels", {}).get(m.INDEX_LABEL) or pod["metadata"].get(
            "annotations", {}
        ).get(m.INDEX_ANNOTATION)
        if index is None:
            continue
        key = int(index)
        old = chosen.get(key)
        if old is None or pod["metadata"].get("creationTimestamp", "") >= old["metadata"].get(
            "creationTimestamp", ""
        ):
            chosen[key] = pod
    return chosen


def terminated(pod: Obj) -> Obj | None:
    for status in pod.get("status", {}).get("containerStatuses", []) or []:
        if status.get("name") == m.CONTAINER:
            found: Obj | None = status.get("state", {}).get("terminated")
            return found
    return None


def exit_code(state: Obj) -> int:
    """A container's exit code in Flotilla's convention: ``-N`` for a kill by signal N."""
    if state.get("signal"):
        return -int(state["signal"])
    return int(state.get("exitCode", 0))


def waiting_reason(pod: Obj) -> str | None:
    for status in pod.get("status", {}).get("containerStatuses", []) or []:
        waiting = status.get("state", {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return None


def replica_state(pod: Obj | None) -> BackendRunState:
    if pod is None:
        return BackendRunState.PENDING
    phase = pod.get("status", {}).get("phase")
    if phase == "Succeeded":
        return BackendRunState.SUCCEEDED
    if phase == "Failed":
        return BackendRunState.FAILED
    if phase == "Running":
        return BackendRunState.RUNNING
    return BackendRunState.PENDING


def condition(job: Obj, kind: str) -> Obj | None:
    for item in job.get("status", {}).get("conditions", []) or []:
        if item.get("type") == kind and item.get("status") == "True":
            found: Obj = item
            return found
    return None


def finished(job: Obj) -> bool:
    """The Job has ended: ``Complete`` or ``Failed``."""
    return condition(job, "Complete") is not None or condition(job, "Failed") is not None


def run_status(
    job: Obj, pods: Sequence[Obj], cluster: str, cancelled_reason: str | None = None
) -> RunStatus:
    """The run of ``job``. ``cancelled_reason`` overrides the Job's own annotation (a Job
    already deleted by this backend's cancel)."""
    meta = job["metadata"]
    annotations = meta.get("annotations", {})
    placements = m.placements_from_annotation(annotations[m.ANNOTATION_PLACEMENTS])
    dispatched_at = float(annotations[m.ANNOTATION_DISPATCHED_AT])
    by_index = pods_by_index(pods)
    replicas = []
    started: list[float] = []
    finished: list[float] = []
    failures: list[tuple[bool, float, int, str, int, str]] = []
    for index, placement in enumerate(placements):
        pod = by_index.get(index)
        state = replica_state(pod)
        code = None
        node = placement.node
        if pod is not None:
            node = pod.get("spec", {}).get("nodeName") or placement.node
            begun = timestamp(pod.get("status", {}).get("startTime"))
            if begun is not None and state is not BackendRunState.PENDING:
                started.append(begun)
            end = terminated(pod)
            if end is not None:
                code = exit_code(end)
                done = timestamp(end.get("finishedAt"))
                if done is not None:
                    finished.append(done)
                if code != 0:
                    # A replica the Job controller stopped (deleted, as the others of a failed
                    # gang are) did not cause the failure: the one that failed on its own did.
                    stopped = bool(pod["metadata"].get("deletionTimestamp"))
                    failures.append(
                        (
                            stopped,
                            done or 0.0,
                            index,
                            placement.label,
                            code,
                            str(end.get("reason", "")),
                        )
                    )
        engine_id = (
            meta.get("name") if len(placements) == 1 else f"{meta.get('name')} (index {index})"
        )
        replicas.append(
            ReplicaStatus(placement.task, placement.replica, node, state, code, engine_id=engine_id)
        )
    failing = (*min(failures)[3:], min(failures)[0]) if failures else None
    reason = cancelled_reason or annotations.get(m.ANNOTATION_CANCEL_REASON)
    state, code, message = _overall(job, replicas, failing, reason, by_index)
    started_at = max(dispatched_at, min(started)) if started else None
    finished_at = None
    if state.terminal:
        job_status = job.get("status", {})
        end_time = timestamp(job_status.get("completionTime"))
        ended = condition(job, "Failed") or condition(job, "Complete")
        ended_at = timestamp(ended.get("lastTransitionTime")) if ended is not None else None
        candidates = [t for t in (end_time, *finished) if t is not None]
        if candidates:
            finished_at = max(candidates)
        elif ended_at is not None:
            # The pods are gone (the Job controller deletes them at the deadline): the Job's
            # own condition says when it ended, not 0 s after the start.
            finished_at = ended_at
        elif state is BackendRunState.CANCELLED:
            finished_at = time.time()  # the pods are gone, and with them their end times
        else:
            finished_at = started_at or dispatched_at
        if started_at is None and state is not BackendRunState.CANCELLED:
            # No pod left to say when it started: the Job's start, from which the controller
            # counts activeDeadlineSeconds too.
            job_started = timestamp(job_status.get("startTime"))
            started_at = max(dispatched_at, job_started) if job_started else dispatched_at
        finished_at = max(finished_at, started_at or dispatched_at)
    if state.terminal:
        # A replica whose pod is gone without an end of its own was stopped with its run
        # (a cancel, or the Job controller at the deadline or a gang's failure): it ended
        # as the run did, never "pending" in a finished run.
        stopped_as = (
            BackendRunState.CANCELLED
            if state is BackendRunState.CANCELLED
            else BackendRunState.FAILED
            if state is BackendRunState.FAILED
            else None
        )
        if stopped_as is not None:
            replicas = [
                r if r.state.terminal else dataclasses.replace(r, state=stopped_as)
                for r in replicas
            ]
    return RunStatus(
        run_id=annotations[m.ANNOTATION_RUN_ID],
        job=annotations[m.ANNOTATION_JOB],
        cluster=cluster,
        state=state,
        dispatched_at=dispatched_at,
        started_at=started_at,
        finished_at=finished_at,
        exit_code=code,
        message=message,
        replicas=tuple(replicas),
    )


def _overall(
    job: Obj,
    replicas: Sequence[ReplicaStatus],
    failing: tuple[str, int, str, bool] | None,
    cancel_reason: str | None,
    by_index: Mapping[int, Obj],
) -> tuple[BackendRunState, int | None, str]:
    if cancel_reason is not None:
        live = [pod for pod in by_index.values() if replica_state(pod) in _LIVE]
        if live:
            return BackendRunState.RUNNING, None, f"stopping: {cancel_reason}"
        return BackendRunState.CANCELLED, None, cancel_reason
    if condition(job, "Complete"):
        return BackendRunState.SUCCEEDED, 0, "every replica exited 0"
    failed = condition(job, "Failed")
    if failed is not None:
        if failed.get("reason") == "DeadlineExceeded":
            limit = job["metadata"].get("annotations", {}).get(m.ANNOTATION_MAX_RUNTIME)
            return BackendRunState.FAILED, None, f"exceeded max_runtime of {limit}s"
        if failing is not None:
            label, code, why, deleted = failing
            detail = f" ({why})" if why and why not in ("Error", "Completed") else ""
            if deleted:  # stopped by a deletion this backend did not make
                detail += f" when {DELETED_OUTSIDE}"
            return BackendRunState.FAILED, code, f"replica {label} exited with code {code}{detail}"
        if _pods_lag_behind(job, by_index):
            return BackendRunState.RUNNING, None, "ending: the Job failed"
        reason = failed.get("reason", "")
        if reason == "BackoffLimitExceeded":
            # No replica failed on its own: a pod went without an exit of its own.
            return BackendRunState.FAILED, None, f"job failed: {reason}: {DELETED_OUTSIDE}"
        return BackendRunState.FAILED, None, f"job failed: {reason}".rstrip(": ")
    if any(replica.state is BackendRunState.RUNNING for replica in replicas):
        return BackendRunState.RUNNING, None, ""
    if job.get("spec", {}).get("suspend"):
        return BackendRunState.PENDING, None, "waiting for admission (the Job is suspended)"
    reasons = [text for pod in by_index.values() if (text := waiting_reason(pod))]
    return BackendRunState.PENDING, None, reasons[0] if reasons else ""


_LIVE = (BackendRunState.PENDING, BackendRunState.RUNNING)

DELETED_OUTSIDE = (
    "its pod was deleted outside Flotilla (kubectl delete pod, an eviction, a node drain "
    "or loss), which the Job counts as a failure"
)
"""Why a run failed whose pod went without Flotilla's cancel (Flotilla deletes the Job, and
says why): a real kube-apiserver reports only ``BackoffLimitExceeded``."""


def _pods_lag_behind(job: Obj, by_index: Mapping[int, Obj]) -> bool:
    """The Job counts a failed pod, yet every pod this backend sees has still to end: its
    pods' watch is behind its Jobs' (two streams; Kubernetes marks a Job ``Failed`` only once
    every pod has ended). Reporting the run now would end it without the failing replica's
    exit code for good (seen under load: a replica that exited 3 reported as ``job failed``),
    so the run stays running until the pods' ends arrive; a pod deleted meanwhile stops
    counting, so this cannot wait for ever."""
    counted = int(job.get("status", {}).get("failed") or 0)
    return counted > 0 and any(replica_state(pod) in _LIVE for pod in by_index.values())


GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""Labels NVIDIA's GPU feature discovery (GPU operator) puts on a node: the model
(``NVIDIA-H200``) and each device's memory in MiB (``143771``)."""


def node_info(node: Obj, gpu_resource: str) -> NodeInfo:
    """A Node as Flotilla sees it: allocatable resources, labels, taints, and its GPUs (count
    from ``gpu_resource``; model and per-device memory from the GPU operator's labels, so a
    ``gpu_memory`` job can be placed there)."""
    allocatable = node.get("status", {}).get("allocatable", {})
    gpus = int(parse_quantity(allocatable.get(gpu_resource, "0")))
    capacity: dict[str, float] = {
        "cpu": parse_quantity(allocatable.get("cpu", "0")),
        "memory": parse_quantity(allocatable.get("memory", "0")),
        "gpu": float(gpus),
    }
    labels = dict(node["metadata"].get("labels", {}))
    memory_mib = str(labels.get(GPU_MEMORY_LABEL, "")).strip()
    gpu_memory = float(int(memory_mib) * 2**20) if gpus and memory_mib.isdigit() else None
    if gpu_memory:
        capacity["gpu_memory"] = gpu_memory * gpus
    product = labels.get(GPU_PRODUCT_LABEL) if gpus else None
    taints = tuple(
        Taint(
            key=item["key"],
            value=str(item.get("value") or ""),
            effect=TaintEffect(item.get("effect", "NoSchedule")),
        )
        for item in node.get("spec", {}).get("taints", []) or []
    )
    return NodeInfo(
        name=node["metadata"]["name"],
        capacity=capacity,
        labels=labels,
        taints=taints,
        gpu_count=gpus,
        gpu_memory=gpu_memory or None,
        gpu_model=str(product) if product else None,
    )


def usable(node: Obj) -> bool:
    """Ready and not cordoned: a node Flotilla may place on."""
    if node.get("spec", {}).get("unschedulable"):
        return False
    for item in node.get("status", {}).get("conditions", []) or []:
        if item.get("type") == "Ready":
            return bool(item.get("status") == "True")
    return False
