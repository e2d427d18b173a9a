"""The state and controllers behind the fake Kubernetes API server (fake_kube_apiserver.py).

Objects by kind, namespace and name with a global ``resourceVersion`` and a bounded watch
history; a Job controller, a scheduler for the pods no external scheduler owns, and a kubelet
that runs pods as local processes (or lets tests move them through phases). One thread calls
``step`` every 20 ms.
"""

from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HISTORY = 2000
"""Watch events kept; a watch from an older resourceVersion gets 410 Gone, as for real."""

Obj = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
class Process:
    popen: subprocess.Popen[bytes]
    log: Path
    kill_at: float | None = None


@dataclass
class FakeCluster:
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

    def set_running(self, pod: Obj) -> None:
        with self.lock:
            pod["status"] = {
                "phase": "Running",
                "startTime": now_rfc3339(),
                "containerStatuses": [
                    {
                        "name": pod["spec"]["containers"][0]["name"],
                        "ready": True,
                        "restartCount": 0,
                        "image": pod["spec"]["containers"][0]["image"],
                        "imageID": "",
                        "state": {"running": {"startedAt": now_rfc3339()}},
                    }
                ],
            }
            self.put("Pod", pod)

    def terminate(self, pod: Obj, exit_code: int, reason: str | None = None) -> None:
        with self.lock:
            started = (
                pod["status"]
                .get("containerStatuses", [{}])[0]
                .get("state", {})
                .get("running", {})
                .get("startedAt", now_rfc3339())
            )
            pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            pod["status"]["containerStatuses"] = [
                {
                    "name": pod["spec"]["containers"][0]["name"],
                    "ready": False,
                    "restartCount": 0,
                    "image": pod["spec"]["containers"][0]["image"],
                    "imageID": "",
                    "state": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                            "startedAt": started,
                            "finishedAt": now_rfc3339(),
                        }
                    },
                }
            ]
            self.put("Pod", pod)

    def append_log(self, pod: Obj, text: str) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self.lock:
            self.logs[key] = self.logs.get(key, b"") + text.encode()

    def pod_log(self, namespace: str, name: str) -> bytes:
        with self.lock:
            process = self.processes.get((namespace, name))
            if process is not None:
                return process.log.read_bytes()
            return self.logs.get((namespace, name), b"")

    # --- controllers: one step, run by the controller thread ---

    def step(self) -> None:
        with self.lock:
            for job in self.list("Job"):
                self._reconcile_job(job)
            self._schedule()
            self._kubelet()

    def _reconcile_job(self, job: Obj) -> None:
        meta, spec = job["metadata"], job["spec"]
        namespace, name = meta["namespace"], meta["name"]
        status = job.setdefault("status", {})
        pods = self.list("Pod", namespace, f"batch.kubernetes.io/job-name={name}")
        live = [pod for pod in pods if pod["status"].get("phase") in ("Pending", "Running")]
        if meta.get("deletionTimestamp"):
            for pod in live:
                self.delete_pod(pod, None)
            if not self.list("Pod", namespace, f"batch.kubernetes.io/job-name={name}"):
                self.remove("Job", namespace, name)
            return
        conditions = status.setdefault("conditions", [])
        if any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions):
            return
        if spec.get("suspend"):
            return
        changed = False
        if "startTime" not in status:
            status["startTime"] = now_rfc3339()
            status["_started"] = time.time()
            changed = True
        succeeded = {pod_index(p) for p in pods if p["status"].get("phase") == "Succeeded"}
        failed = [p for p in pods if p["status"].get("phase") == "Failed"]
        deadline = spec.get("activeDeadlineSeconds")
        if len(failed) > spec.get("backoffLimit", 6) or (
            deadline is not None and time.time() - status["_started"] > deadline
        ):
            for pod in live:
                self.delete_pod(pod, 0)
            reason = "BackoffLimitExceeded" if live == [] or failed else "DeadlineExceeded"
            if deadline is not None and time.time() - status["_started"] > deadline:
                reason = "DeadlineExceeded"
            if not live or reason == "BackoffLimitExceeded":
                self._finish(job, "Failed", reason, len(failed), len(succeeded))
            return
        completions = spec.get("completions", 1)
        if len(succeeded) >= completions:
            self._finish(job, "Complete", "CompletionsReached", len(failed), len(succeeded))
            return
        have = {pod_index(p) for p in pods if p["status"].get("phase") != "Failed"}
        for index in range(completions):
            if index not in have and index not in succeeded:
                self._create_pod(job, index)
                changed = True
        active = sum(1 for p in pods if p["status"].get("phase") in ("Pending", "Running"))
        if status.get("active") != active or status.get("succeeded") != len(succeeded):
            status["active"], status["succeeded"], status["failed"] = (
                active,
                len(succeeded),
                len(failed),
            )
            changed = True
        if changed:
            self.put("Job", job)

    def _finish(self, job: Obj, kind: str, reason: str, failed: int, succeeded: int) -> None:
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
        status.update(active=0, failed=failed, succeeded=succeeded)
        if kind == "Complete":
            status["completionTime"] = now_rfc3339()
        self.put("Job", job)

    def _create_pod(self, job: Obj, index: int) -> None:
        template = copy.deepcopy(job["spec"]["template"])
        meta = template.setdefault("metadata", {})
        name = job["metadata"]["name"]
        labels = meta.setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/job-name": name,
                "job-name": name,
                "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                "batch.kubernetes.io/job-completion-index": str(index),
            }
        )
        meta.setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(index)
        meta["name"] = f"{name}-{index}-{uuid.uuid4().hex[:5]}"
        meta["namespace"] = job["metadata"]["namespace"]
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": name,
                "uid": job["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        pod_spec = template["spec"]
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec["hostname"] = f"{name}-{index}"
        for container in pod_spec["containers"]:
            container.setdefault("env", []).append(
                {"name": "JOB_COMPLETION_INDEX", "value": str(index)}
            )
        pod = {"apiVersion": "v1", "kind": "Pod", **template, "status": {"phase": "Pending"}}
        self.put("Pod", pod, "ADDED")

    def _schedule(self) -> None:
        nodes = self.list("Node")
        for pod in self.list("Pod"):
            spec = pod["spec"]
            if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp") or not nodes:
                continue
            if spec.get("schedulerName") in ("default-scheduler", "volcano"):
                spec["nodeName"] = nodes[0]["metadata"]["name"]
                self.put("Pod", pod)

    def _kubelet(self) -> None:
        for pod in self.list("Pod"):
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            process = self.processes.get(key)
            if meta.get("deletionTimestamp"):
                self._stop(pod, process)
                continue
            if not self.run_processes or process is not None:
                if (
                    process is not None
                    and process.popen.poll() is not None
                    and pod["status"].get("phase") == "Running"
                ):
                    self._exited(pod, process)
                continue
            if pod["spec"].get("nodeName") and pod["status"].get("phase") == "Pending":
                self._start(pod)

    def _start(self, pod: Obj) -> None:
        container = pod["spec"]["containers"][0]
        argv = [*container.get("command", []), *container.get("args", [])]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
            elif "fieldRef" in item.get("valueFrom", {}):
                env[item["name"]] = field_value(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
        log = self.log_dir / f"{pod['metadata']['name']}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=container.get("workingDir") or self.log_dir,
                start_new_session=True,
            )
        self.processes[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = Process(
            popen, log
        )
        self.set_running(pod)

    def _exited(self, pod: Obj, process: Process) -> None:
        code = process.popen.returncode
        self.terminate(pod, code if code >= 0 else 128 - code)

    def _stop(self, pod: Obj, process: Process | None) -> None:
        meta = pod["metadata"]
        if process is None or process.popen.poll() is not None:
            if process is not None:
                self.logs[(meta["namespace"], meta["name"])] = process.log.read_bytes()
                del self.processes[(meta["namespace"], meta["name"])]
            self.remove("Pod", meta["namespace"], meta["name"])
            return
        if process.kill_at is None:
            process.kill_at = time.time() + meta.get("deletionGracePeriodSeconds", 30)
            os.killpg(process.popen.pid, signal.SIGTERM)
        elif time.time() >= process.kill_at:
            os.killpg(process.popen.pid, signal.SIGKILL)

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
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = grace
        if not pod["spec"].get("nodeName") or pod["status"].get("phase") in (
            "Succeeded",
            "Failed",
        ):
            self.put("Pod", pod)
            self.remove("Pod", meta["namespace"], meta["name"])
            return
        self.put("Pod", pod)

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.popen.poll() is None:
                os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait()


def pod_index(pod: Obj) -> int:
    return int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])


def field_value(pod: Obj, path: str) -> str:
    """The downward API's fieldRef: ``spec.nodeName``, ``metadata.annotations['a.b/c']``."""
    keyed = re.match(r"^metadata\.(annotations|labels)\['(.+)'\]$", path)
    if keyed:
        return str(pod["metadata"].get(keyed.group(1), {}).get(keyed.group(2), ""))
    value: Any = pod
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)
