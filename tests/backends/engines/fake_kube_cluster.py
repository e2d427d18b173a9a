"""The state and controllers behind the fake Kubernetes API server (fake_kube_apiserver.py).

Objects by kind, namespace and name with a global ``resourceVersion`` and a bounded watch
history; a Job controller, a garbage collector, a scheduler for the pods no external scheduler
owns, and the kubelet of fake_kube_kubelet.py. One thread calls ``step`` every 20 ms.
"""

from __future__ import annotations

import copy
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .fake_kube_kubelet import Kubelet, Process, finalizers, now_rfc3339
from .fake_kube_semantics import (
    CONTROLLER_UID,
    INDEX,
    TRACKING_FINALIZER,
    pod_from_template,
)

HISTORY = 200_000
"""Watch events kept (a bound on memory only): a watch from an old resourceVersion is served
until the history is compacted (``expire_history``, etcd's compaction), then gets 410 Gone."""

Obj = dict[str, Any]


def status_object(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.body = status_object(code, reason, message)
        self.code = code


def matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (``a=b,c``, ``a!=b``), as the backend uses them."""
    if not selector:
        return True
    for term in selector.split(","):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class FakeCluster(Kubelet):
    """The state behind the API: objects by (kind, namespace, name) and the watch history."""

    run_processes: bool = True
    validate: bool = True
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    events: list[tuple[int, str, str, Obj]] = field(default_factory=list)
    version: int = 100
    logs: dict[tuple[str, str], bytes] = field(default_factory=dict)
    processes: dict[tuple[str, str], Process] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path) of every request, for tests that assert what the backend called."""
    down: bool = False
    api_groups: set[str] = field(
        default_factory=lambda: {"scheduling.volcano.sh", "kueue.x-k8s.io"}
    )
    """The API groups of installed CRDs (Volcano, Kueue); remove one to uninstall it."""
    status_delay: float = 0.3
    """Seconds between a container's exit and its pod's status saying so (a real kubelet's
    sync takes a second or two), so a cancel or a timeout takes time, in the real order."""
    """When true every request is refused with 503 (the API server is unhealthy)."""
    lock: threading.Condition = field(
        default_factory=lambda: threading.Condition(threading.RLock())
    )
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fake-kubelet-")))

    # --- object store ---

    def _bump(self, kind: str, event: str, obj: Obj) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.events.append((self.version, kind, event, copy.deepcopy(obj)))
        del self.events[:-HISTORY]
        self.lock.notify_all()

    def put(self, kind: str, obj: Obj, event: str = "MODIFIED") -> Obj:
        with self.lock:
            meta = obj["metadata"]
            key = (kind, meta.get("namespace", ""), meta["name"])
            if event == "ADDED":
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_rfc3339())
                meta.setdefault("generation", 1)
            self.objects[key] = obj
            self._bump(kind, event, obj)
            return obj

    def remove(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            obj = self.objects.pop((kind, namespace, name), None)
            if obj is not None:
                self._bump(kind, "DELETED", obj)

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self.objects.get((kind, namespace, name))

    def list(
        self, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[Obj]:
        with self.lock:
            return [
                obj
                for (k, ns, _), obj in sorted(self.objects.items())
                if k == kind
                and (namespace is None or ns == namespace)
                and matches(selector, obj["metadata"].get("labels", {}))
            ]

    def expire_history(self) -> None:
        """Forget every watch event, so a watch resuming from an old version gets 410 Gone."""
        with self.lock:
            self.events.clear()
            self.version += 1000

    # --- nodes ---

    def add_node(
        self,
        name: str,
        *,
        cpu: str = "8",
        memory: str = "32Gi",
        gpus: int = 0,
        labels: dict[str, str] | None = None,
        taints: list[Obj] | None = None,
        ready: bool = True,
    ) -> Obj:
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        node: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"taints": taints} if taints else {},
            "status": {
                "capacity": dict(allocatable),
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        return self.put("Node", node, "ADDED")

    # --- the kubelet, driven by tests when run_processes is false ---

    def pods_of(self, job: str, namespace: str = "default") -> list[Obj]:
        return sorted(
            self.list("Pod", namespace, f"batch.kubernetes.io/job-name={job}"),
            key=lambda pod: int(
                pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            ),
        )

    # --- controllers: one step, run by the controller thread ---

    def step(self) -> None:
        with self.lock:
            for job in self.list("Job"):
                self._reconcile_job(job)
            self._collect_garbage()
            self._schedule()
            self._kubelet()

    def owned_pods(self, job: Obj) -> list[Obj]:
        """The Job's pods as its controller selects them: by controller-uid, not by name."""
        meta = job["metadata"]
        return self.list("Pod", meta["namespace"], f"{CONTROLLER_UID}={meta['uid']}")

    def _reconcile_job(self, job: Obj) -> None:
        meta, spec = job["metadata"], job["spec"]
        status = job.setdefault("status", {})
        for pod in self.owned_pods(job):
            self._track(pod, job)
        pods = self.owned_pods(job)
        live = [pod for pod in pods if pod["status"].get("phase") in ("Pending", "Running")]
        if meta.get("deletionTimestamp"):  # foreground deletion: the pods first, then the Job
            for pod in live:
                self.delete_pod(pod, None)
            if not pods:
                self.remove("Job", meta["namespace"], meta["name"])
            return
        conditions = status.setdefault("conditions", [])
        if _condition(conditions, "Complete") or _condition(conditions, "Failed"):
            return
        target = _condition(conditions, "FailureTarget") or _condition(
            conditions, "SuccessCriteriaMet"
        )
        if target is not None:
            # Failed/Complete only once every pod has ended and been counted.
            if not live and not any(TRACKING_FINALIZER in finalizers(p) for p in pods):
                final = "Failed" if target["type"] == "FailureTarget" else "Complete"
                self._condition(job, final, target["reason"])
            return
        if spec.get("suspend"):
            for pod in live:
                self.delete_pod(pod, None)
            return
        changed = False
        if "startTime" not in status:
            status["startTime"] = now_rfc3339()
            status["_started"] = time.time()
            changed = True
        succeeded = set(status.get("_completed", []))
        failed = status.get("failed", 0)
        deadline = spec.get("activeDeadlineSeconds")
        reason = None
        if deadline is not None and time.time() - status["_started"] > deadline:
            reason = "DeadlineExceeded"
        elif failed > spec.get("backoffLimit", 6):
            reason = "BackoffLimitExceeded"
        if reason is not None:
            # The other replicas are deleted with their own grace period.
            for pod in live:
                self.delete_pod(pod, None)
            status["active"] = 0
            self._condition(job, "FailureTarget", reason)
            return
        completions = spec.get("completions", 1)
        if len(succeeded) >= completions:
            status["active"] = 0
            self._condition(job, "SuccessCriteriaMet", "CompletionsReached")
            return
        have = succeeded | {pod_index(p) for p in pods if p["status"].get("phase") != "Failed"}
        room = spec.get("parallelism", 1) - len(live)  # never more pods active than that
        for index in range(completions):
            if index not in have and room > 0:
                self.put("Pod", pod_from_template(job, index), "ADDED")
                room -= 1
                changed = True
        if status.get("active") != len(live) or status.get("succeeded") != len(succeeded):
            status["active"], status["succeeded"] = len(live), len(succeeded)
            changed = True
        if changed:
            self.put("Job", job)

    def _track(self, pod: Obj, job: Obj | None = None) -> None:
        """Count an ended pod in its Job's status, then drop its job-tracking finalizer (a
        deleted pod then goes)."""
        meta = pod["metadata"]
        phase = pod["status"].get("phase")
        ended = phase in ("Succeeded", "Failed")
        unbound_and_deleted = meta.get("deletionTimestamp") and not pod["spec"].get("nodeName")
        if TRACKING_FINALIZER in finalizers(pod) and (ended or unbound_and_deleted):
            if job is not None:
                status = job.setdefault("status", {})
                if phase == "Succeeded":
                    done = sorted({*status.get("_completed", []), pod_index(pod)})
                    status["_completed"] = done
                    status["completedIndexes"] = ",".join(str(index) for index in done)
                else:
                    status["failed"] = status.get("failed", 0) + 1
                self.put("Job", job)
            meta["finalizers"] = [f for f in meta["finalizers"] if f != TRACKING_FINALIZER]
            if not meta["finalizers"]:
                del meta["finalizers"]
            self.put("Pod", pod)
        if meta.get("deletionTimestamp") and not finalizers(pod) and (ended or unbound_and_deleted):
            self.remove("Pod", meta["namespace"], meta["name"])

    def _condition(self, job: Obj, kind: str, reason: str) -> None:
        status = job["status"]
        status["conditions"].append(
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": reason,
                "lastProbeTime": now_rfc3339(),
                "lastTransitionTime": now_rfc3339(),
            }
        )
        if kind == "Complete":
            status["completionTime"] = now_rfc3339()
        self.put("Job", job)

    def _collect_garbage(self) -> None:
        """The garbage collector: an object whose owner is gone is deleted (pods gracefully)."""
        alive = {obj["metadata"].get("uid") for obj in self.objects.values()}
        for (kind, namespace, name), obj in list(self.objects.items()):
            owners = obj["metadata"].get("ownerReferences") or []
            if not owners or any(owner["uid"] in alive for owner in owners):
                continue
            if kind == "Pod":
                self.delete_pod(obj, None)
                self._track(obj)
            else:
                self.remove(kind, namespace, name)

    def _schedule(self) -> None:
        nodes = self.list("Node")
        for pod in self.list("Pod"):
            spec = pod["spec"]
            if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp") or not nodes:
                continue
            if spec.get("schedulerName") in ("default-scheduler", "volcano"):
                spec["nodeName"] = nodes[0]["metadata"]["name"]
                self.put("Pod", pod)

    def delete_pod(self, pod: Obj, grace: int | None) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            if grace is not None:
                meta["deletionGracePeriodSeconds"] = min(
                    grace, meta.get("deletionGracePeriodSeconds", grace)
                )
            return
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        ended = pod["status"].get("phase") in ("Succeeded", "Failed")
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = (
            0 if ended or not pod["spec"].get("nodeName") else grace
        )
        self.put("Pod", pod)
        if (ended or not pod["spec"].get("nodeName")) and not finalizers(pod):
            self.remove("Pod", meta["namespace"], meta["name"])


def _condition(conditions: list[Obj], kind: str) -> Obj | None:
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def pod_index(pod: Obj) -> int:
    return int(pod["metadata"]["labels"][INDEX])
