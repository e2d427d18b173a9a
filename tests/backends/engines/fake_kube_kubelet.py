"""The fake cluster's kubelet (fake_kube_cluster.py): runs each bound pod's container as a local
process, reports its exit after ``status_delay``, stops it on deletion (SIGTERM, then SIGKILL
after the grace period); or, with ``run_processes=False``, lets tests move pods through phases
(``set_running``, ``terminate``, ``append_log``)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .fake_kube_semantics import container_env, expand

Obj = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Process:
    popen: subprocess.Popen[bytes]
    log: Path
    kill_at: float | None = None
    exited_at: float | None = None


class Kubelet:
    """The kubelet's part of ``FakeCluster`` (a mixin: the state is the cluster's)."""

    run_processes: bool
    status_delay: float
    logs: dict[tuple[str, str], bytes]
    processes: dict[tuple[str, str], Process]
    lock: threading.Condition
    log_dir: Path

    def put(self, kind: str, obj: Obj, event: str = "MODIFIED") -> Obj:
        raise NotImplementedError

    def remove(self, kind: str, namespace: str, name: str) -> None:
        raise NotImplementedError

    def list(
        self, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[Obj]:
        raise NotImplementedError

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

    def _kubelet(self) -> None:
        nodes = {node["metadata"]["name"] for node in self.list("Node")}
        for pod in self.list("Pod"):
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            process = self.processes.get(key)
            if pod["spec"].get("nodeName") not in nodes:
                # Unbound, or on a node that does not exist (no kubelet runs it: deleted, the
                # pod goes as pod GC would take it).
                if meta.get("deletionTimestamp") and pod["spec"].get("nodeName"):
                    self._stop(pod, None)
                continue
            if process is not None and process.popen.poll() is not None:
                if process.exited_at is None:
                    process.exited_at = time.time()
                if (
                    pod["status"].get("phase") == "Running"
                    and time.time() >= process.exited_at + self.status_delay
                ):
                    self._exited(pod, process)
            if meta.get("deletionTimestamp"):
                self._stop(pod, process)
                continue
            if (
                self.run_processes
                and process is None
                and pod["status"].get("phase") == "Pending"
                and key not in self.logs
            ):
                self._start(pod)

    def _start(self, pod: Obj) -> None:
        container = pod["spec"]["containers"][0]
        env = container_env(pod, container)
        argv = [
            expand(part, env)
            for part in [*container.get("command", []), *container.get("args", [])]
        ]
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
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
        """A deleted pod: SIGTERM, SIGKILL after its grace period; once its container has
        ended (and been reported), the pod goes when no finalizer holds it."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if process is not None and process.popen.poll() is None:
            if process.kill_at is None:
                process.kill_at = time.time() + meta.get("deletionGracePeriodSeconds", 30)
                os.killpg(process.popen.pid, signal.SIGTERM)
            elif time.time() >= process.kill_at:
                os.killpg(process.popen.pid, signal.SIGKILL)
            return
        if pod["status"].get("phase") == "Running":
            if process is not None:
                return  # exited: reported after the status delay, above
            self.terminate(pod, 137)  # a test-driven pod: killed at once
        if pod["status"].get("phase") == "Pending":
            pod["status"]["phase"] = "Failed"
            self.put("Pod", pod)
        if process is not None:
            self.logs[key] = process.log.read_bytes()
            del self.processes[key]
        if not finalizers(pod):
            self.remove("Pod", meta["namespace"], meta["name"])

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.popen.poll() is None:
                os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait()


def finalizers(obj: Obj) -> list[str]:
    found: list[str] = obj["metadata"].get("finalizers") or []
    return found
