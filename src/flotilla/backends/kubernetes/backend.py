"""The ``kubernetes`` backend: a run is an Indexed batch/v1 Job, its replicas bound to Flotilla's
nodes.

Truth lives in the API server, never on local disk: a run's Job has a deterministic name
(``manifests.job_name``), the run id in an annotation and a label, and the cluster marker
label, so any backend object over the same namespace and cluster — after a restart, in
another scheduler replica — finds every run (adoption) and never creates one twice.

Two watch threads (Jobs, Pods; each a list, then a watch from its ``resourceVersion``, and a
fresh list after any error or ``410 Gone``) keep a cache that ``poll`` reads, and bind each
new pod to the node its completion index was placed on (``native`` mode). ``status``,
``cancel`` and ``logs`` read the server directly, so they are exact right after a write.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from flotilla.backends.common import ChangeLog, any_payload_of, check_request, pick_replica
from flotilla.backends.interface import (
    RUN_ID_PATTERN,
    BackendClosed,
    BackendRunState,
    BackendUnavailable,
    CancelOutcome,
    CancelRequest,
    CancelResult,
    DispatchRejected,
    DispatchRequest,
    DispatchResult,
    Inventory,
    LogChunk,
    LogsRequest,
    LogStream,
    ReplicaPlacement,
    RunStatus,
    StatusRequest,
    UnknownRun,
)
from flotilla.backends.kubernetes import growth
from flotilla.backends.kubernetes import manifests as m
from flotilla.backends.kubernetes.api import ApiFailure, KubeApi
from flotilla.backends.kubernetes.ended_logs import EndedLogs
from flotilla.backends.kubernetes.kept import KeptOutput
from flotilla.backends.kubernetes.nodes import NodeReader
from flotilla.backends.kubernetes.status import finished, pods_by_index, run_status
from flotilla.backends.kubernetes.watch import ClusterWatch
from flotilla.model.payload import RayPayload

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PROPAGATION = ("Foreground", "Background")
CANCELLED_KEPT = 10_000
MODE_APIS = {
    "volcano": ("scheduling.volcano.sh/v1beta1", "podgroups", "Volcano"),
    "kueue": ("kueue.x-k8s.io/v1beta1", "workloads", "Kueue"),
}
"""The API a mode's objects need, checked by discovery before a run creates anything."""


class KubernetesBackend:
    """One Kubernetes cluster (one namespace of it). See the module docstring."""

    name = "kubernetes"
    shares_gpu_devices: ClassVar[bool] = False
    """The device plugin hands out whole ``nvidia.com/gpu`` devices: no ``gpu: 0.5``."""

    def __init__(
        self,
        *,
        cluster: str = "kubernetes",
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        namespace: str | None = None,
        mode: str = "native",
        default_image: str = "python:3.12-slim",
        scheduler_name: str = "flotilla",
        grace_period: float = 30.0,
        propagation: str = "Foreground",
        gpu_resource: str = "nvidia.com/gpu",
        queue_name: str | None = None,
        volcano_queue: str = "default",
        image_pull_secrets: Sequence[str] = (),
        request_timeout: float = 10.0,
        watch_timeout: int = 30,
        count_other_pods: bool = True,
    ) -> None:
        if mode not in m.MODES:
            raise ValueError(f"mode: {mode!r} is not one of {', '.join(m.MODES)}")
        if mode == "kueue" and not queue_name:
            raise ValueError("queue_name: mode kueue needs the name of a Kueue LocalQueue")
        if propagation not in PROPAGATION:
            raise ValueError(f"propagation: {propagation!r} is not one of {', '.join(PROPAGATION)}")
        if grace_period < 0:
            raise ValueError(f"grace_period: {grace_period:g} must be >= 0")
        self.cluster = cluster
        self.api = KubeApi(
            Path(kubeconfig).expanduser() if kubeconfig else None,
            context,
            namespace,
            request_timeout,
        )
        self.settings = m.JobSettings(
            cluster=cluster,
            namespace=self.api.namespace,
            mode=mode,
            scheduler_name=scheduler_name,
            default_image=default_image,
            grace_period=grace_period,
            gpu_resource=gpu_resource,
            queue_name=queue_name,
            volcano_queue=volcano_queue,
            image_pull_secrets=tuple(image_pull_secrets),
        )
        self.propagation = propagation
        self.watch_timeout = watch_timeout
        self.count_other_pods = count_other_pods
        self._selector = m.selector(cluster)
        self._lock = threading.RLock()
        self._changes = ChangeLog()
        self._polled_once = False
        self._cancelled: dict[str, RunStatus] = {}
        """Runs this object cancelled whose Job is gone: their final status (see docs)."""
        self._stopping: dict[str, RunStatus] = {}
        self._nodes = NodeReader(self.api, self.settings.gpu_resource, count_other_pods)
        self._closed = threading.Event()
        self._mode_api_seen = mode not in MODE_APIS
        self._kept = KeptOutput(self.api)
        self._ended_logs = EndedLogs(self.api.pod_log)
        self._watch = ClusterWatch(
            self.api, self._selector, self.settings, watch_timeout, on_deleting=self._kept.keep
        )

    # --- the contract ---

    def inventory(self) -> Inventory:
        self._check_open()
        nodes = self._nodes.read(fresh=True)
        jobs = self.api.list_jobs(self._selector)["items"]
        active = sorted(
            job["metadata"]["annotations"][m.ANNOTATION_RUN_ID]
            for job in jobs
            if not finished(job) and m.ANNOTATION_RUN_ID in job["metadata"].get("annotations", {})
        )
        return Inventory(self.cluster, tuple(nodes), time.time(), tuple(active))

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        self._check_open()
        nodes = self._nodes.read()
        if any(p.node not in {n.name for n in nodes} for p in request.placements):
            nodes = self._nodes.read(fresh=True)
        check_request(request, self.cluster, nodes)
        payload = any_payload_of(request)
        if isinstance(payload, RayPayload):
            raise DispatchRejected(
                "type: 'ray' jobs do not run on the kubernetes backend (it runs command and "
                "container jobs; a ray job needs a cluster whose backend is ray)"
            )
        name = m.job_name(request.run_id)
        existing = self.api.get_job(name)
        if existing is None and request.run_id in self._cancelled:
            return self._result_of(self._cancelled[request.run_id], request)
        if existing is None:
            self._check_mode_api()
            manifest = m.job_manifest(request, payload, self.settings, time.time())
            try:
                existing = self.api.create_job(manifest)
            except ApiFailure as error:
                if error.code == 409:
                    existing = self.api.get_job(name)
                elif error.code in (400, 422):
                    raise DispatchRejected(f"the Job was refused: {error.message}") from None
                else:
                    raise BackendUnavailable(
                        f"Kubernetes API server at {self.api.address} refused to create Job "
                        f"{name} (HTTP {error.code}: {error.message}); check the RBAC Role"
                    ) from None
            if existing is None:
                raise BackendUnavailable(f"Job {name} vanished while it was being created")
        result = self._result_from_job(existing, request)
        if len(request.placements) > 1:
            # Also on a repeated dispatch, like the PodGroup below.
            self._create_rendezvous_service(existing)
        if self.settings.mode == "volcano":
            # Also on a repeated dispatch: a PodGroup whose creation failed last time is made
            # now, so a retry completes what an interrupted dispatch began.
            self._create_pod_group(existing)
        with self._lock:
            self._watch.remember_job(existing)
            if not self._changes.knows(request.run_id):
                self._changes.observe(request.run_id, BackendRunState.PENDING)
        return result

    @property
    def grows(self) -> bool:
        """Whether runs here can add replicas (``can_grow``): not in ``kueue`` mode."""
        return self.settings.mode != "kueue"

    def add_replicas(self, request: DispatchRequest) -> DispatchResult:
        """``ReplicaGrowth``: the run's Job grows to the request's placements (``growth``)."""
        self._check_open()
        job, pods = self._read(request.run_id)
        if job is None:
            raise DispatchRejected(f"run {request.run_id} has ended: it was cancelled")
        if not growth.growth_of(job, pods, request, self.settings):
            return growth.result_of_job(job, self.cluster)
        nodes = self._nodes.read()
        if any(p.node not in {n.name for n in nodes} for p in request.placements):
            nodes = self._nodes.read(fresh=True)
        check_request(request, self.cluster, nodes)
        grown = growth.scale(self.api, job, request)
        if len(request.placements) > 1:
            self._create_rendezvous_service(grown)  # a run that started with one replica
        with self._lock:
            self._changes.mark(request.run_id)
        return growth.result_of_job(grown, self.cluster)

    def cancel(self, request: CancelRequest) -> CancelResult:
        self._check_open()
        try:
            job, pods = self._read(request.run_id)
        except UnknownRun:
            return CancelResult(
                request.run_id, CancelOutcome.UNKNOWN_RUN, f"no run {request.run_id!r} here"
            )
        if job is None:
            status = self._cancelled[request.run_id]
            return CancelResult(
                request.run_id, CancelOutcome.ALREADY_FINISHED, "already cancelled", status
            )
        status = run_status(job, pods, self.cluster)
        if status.state.terminal:
            return CancelResult(
                request.run_id,
                CancelOutcome.ALREADY_FINISHED,
                f"run {request.run_id} already {status.state.value}",
                status,
            )
        annotations = job["metadata"].get("annotations", {})
        if m.ANNOTATION_CANCEL_REASON in annotations or job["metadata"].get("deletionTimestamp"):
            return CancelResult(
                request.run_id, CancelOutcome.ALREADY_STOPPING, "already stopping", status
            )
        name = job["metadata"]["name"]
        try:
            job = self.api.annotate_job(name, {m.ANNOTATION_CANCEL_REASON: request.reason})
        except ApiFailure as error:
            if error.code != 404:
                raise BackendUnavailable(
                    f"Kubernetes API server at {self.api.address} refused to annotate Job "
                    f"{name} (HTTP {error.code}: {error.message})"
                ) from None
            # Deleted by someone else between the read and the patch: nothing left to stop.
            return CancelResult(
                request.run_id, CancelOutcome.ALREADY_FINISHED, "the Job is already gone", status
            )
        grace = self.settings.grace_period if request.grace_period is None else request.grace_period
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp"):
                self._kept.keep(pod)  # its log goes with it; the watch reads it again as it ends
                try:
                    self.api.delete_pod(pod["metadata"]["name"], max(0, round(grace)))
                except ApiFailure as error:
                    if error.code != 404:  # 404: the pod is gone already, as wanted
                        raise BackendUnavailable(
                            f"Kubernetes API server at {self.api.address} refused to delete "
                            f"pod {pod['metadata']['name']} (HTTP {error.code})"
                        ) from None
        self._delete_job(name)
        status = run_status(job, pods, self.cluster)
        with self._lock:
            self._stopping[request.run_id] = status
        return CancelResult(request.run_id, CancelOutcome.STOPPING, "stopping", status)

    def status(self, request: StatusRequest) -> RunStatus:
        self._check_open()
        job, pods = self._read(request.run_id)
        if job is None:
            return self._cancelled[request.run_id]
        return self._status_of(request.run_id, job, pods)

    def poll(self) -> list[RunStatus]:
        self._check_open()
        jobs, pods = self._snapshot()
        pods_of: dict[str, list[Obj]] = {}
        for pod in pods:
            pods_of.setdefault(
                pod["metadata"].get("labels", {}).get(m.CONTROLLER_UID_LABEL, ""), []
            ).append(pod)
        current: dict[str, RunStatus] = {}
        for job in jobs:
            annotations = job["metadata"].get("annotations", {})
            run_id = annotations.get(m.ANNOTATION_RUN_ID)
            if run_id is None or m.ANNOTATION_PLACEMENTS not in annotations:
                continue  # carries our labels but was not made by a Flotilla backend
            pods_here = pods_of.get(job["metadata"].get("uid", ""), [])
            current[run_id] = self._status_of(run_id, job, pods_here)
        with self._lock:
            for run_id in list(self._stopping):
                if run_id not in current:
                    current[run_id] = self._tombstone(run_id)
            current.update(
                {run_id: s for run_id, s in self._cancelled.items() if run_id not in current}
            )
            first = not self._polled_once
            self._polled_once = True
            for run_id, status in current.items():
                if first and status.state.terminal and not self._changes.knows(run_id):
                    self._changes.remember(run_id, status.state)
                else:
                    self._changes.observe(run_id, status.state)
            return [current[run_id] for run_id in self._changes.drain() if run_id in current]

    def logs(self, request: LogsRequest) -> LogChunk:
        self._check_open()
        if request.offset < 0 or request.limit <= 0:
            raise ValueError("offset must be >= 0 and limit > 0")
        job, pods = self._read(request.run_id)
        if request.stream is LogStream.STDERR:
            # A container keeps one log of both streams, served as stdout: were it stderr as
            # well, a reader of both streams (the SDK's default, the dashboard) got it twice.
            terminal = (
                True if job is None else self._status_of(request.run_id, job, pods).state.terminal
            )
            return LogChunk(
                request.run_id, request.stream, request.offset, request.offset, b"", terminal
            )
        if job is None:
            # Cancelled and deleted: the pods are gone; their output read before is kept.
            status = self._cancelled[request.run_id]
            index = pick_replica(
                [ReplicaPlacement(r.task, r.replica, r.node) for r in status.replicas],
                request.task,
                request.replica,
            )
            data = self._kept.get(request.run_id, index) or b""
            terminal = True
        else:
            placements = m.placements_from_annotation(
                job["metadata"]["annotations"][m.ANNOTATION_PLACEMENTS]
            )
            index = pick_replica(placements, request.task, request.replica)
            pod = pods_by_index(pods).get(index)
            data = b""
            if pod is not None:
                wanted = request.offset + request.limit + 1
                name = pod["metadata"]["name"]
                if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    data = self._ended_logs.read(name, str(pod["metadata"]["uid"]), wanted)
                else:
                    data = self.api.pod_log(name, wanted)
            if not data:
                # A pod deleted (cancel, max_runtime, a gang's failure): its last output.
                data = self._kept.get(request.run_id, index) or b""
            terminal = self._status_of(request.run_id, job, pods).state.terminal
        chunk = data[request.offset : request.offset + request.limit]
        at_end = len(data) <= request.offset + request.limit
        return LogChunk(
            request.run_id,
            request.stream,
            request.offset,
            request.offset + len(chunk),
            chunk,
            terminal and at_end,
        )

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._watch.stop()
        self.api.close()

    # --- reading runs ---

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise BackendClosed(f"the kubernetes backend of cluster {self.cluster!r} is closed")

    def _read(self, run_id: str) -> tuple[Obj | None, list[Obj]]:
        """The run's Job and pods; ``(None, [])`` for a run this object cancelled and whose Job
        is gone. Raises ``UnknownRun``."""
        if not RUN_ID_PATTERN.match(run_id):
            raise UnknownRun(run_id)
        job = self.api.get_job(m.job_name(run_id))
        if job is None or job["metadata"].get("annotations", {}).get(m.ANNOTATION_RUN_ID) != run_id:
            with self._lock:
                if run_id in self._stopping:
                    self._tombstone(run_id)
                if run_id in self._cancelled:
                    return None, []
            raise UnknownRun(run_id)
        # By the Job's uid: a Job of the same name still being deleted may have pods too.
        pods = self.api.list_pods(f"{m.CONTROLLER_UID_LABEL}={job['metadata']['uid']}")["items"]
        self._kept.bind(run_id, str(job["metadata"]["uid"]))
        return job, pods

    def _status_of(self, run_id: str, job: Obj, pods: Sequence[Obj]) -> RunStatus:
        status = run_status(job, pods, self.cluster)
        with self._lock:
            if run_id in self._stopping:
                if status.state.terminal:  # every pod gone; the Job follows (foreground)
                    del self._stopping[run_id]
                    self._remember_cancelled(run_id, status)
                else:
                    self._stopping[run_id] = status
        return status

    def _tombstone(self, run_id: str) -> RunStatus:
        """The final status of a run this object cancelled, once its Job is gone."""
        last = self._stopping.pop(run_id, None)
        if last is None:
            return self._cancelled[run_id]
        reason = last.message.removeprefix("stopping: ")
        replicas = tuple(
            r if r.state.terminal else dataclasses.replace(r, state=BackendRunState.CANCELLED)
            for r in last.replicas
        )
        final = dataclasses.replace(
            last,
            state=BackendRunState.CANCELLED,
            exit_code=None,
            message=reason,
            finished_at=max(time.time(), last.started_at or last.dispatched_at),
            replicas=replicas,
        )
        self._remember_cancelled(run_id, final)
        return final

    def _remember_cancelled(self, run_id: str, status: RunStatus) -> None:
        """Keep the final status of a cancelled run; the oldest are forgotten past a bound (the
        scheduler recorded each cancel long before)."""
        self._cancelled[run_id] = status
        while len(self._cancelled) > CANCELLED_KEPT:
            del self._cancelled[next(iter(self._cancelled))]

    def _snapshot(self) -> tuple[list[Obj], list[Obj]]:
        """Jobs and pods of this cluster: from the watch cache when it is in sync, else listed."""
        cached = self._watch.snapshot()
        if cached is not None:
            return cached
        jobs = self.api.list_jobs(self._selector)["items"]
        pods = self.api.list_pods(self._selector)["items"]
        return jobs, pods

    def _result_from_job(self, job: Obj, request: DispatchRequest) -> DispatchResult:
        result = growth.result_of_job(job, self.cluster)
        if (result.run_id, result.job, result.placements) != (
            request.run_id,
            request.job,
            request.placements,
        ):
            raise DispatchRejected(
                f"run_id: {request.run_id!r} was already dispatched for job {result.job!r} with "
                "other placements; a run id names one attempt"
            )
        return result

    def _result_of(self, status: RunStatus, request: DispatchRequest) -> DispatchResult:
        if status.job != request.job:
            raise DispatchRejected(
                f"run_id: {request.run_id!r} was already dispatched for job {status.job!r}"
            )
        return DispatchResult(
            request.run_id, request.job, self.cluster, status.dispatched_at, request.placements
        )

    # --- writing ---

    def _check_mode_api(self) -> None:
        """``volcano`` and ``kueue`` mode need their CRDs: asked by discovery before a run
        creates anything, so a cluster without them refuses the dispatch and keeps nothing."""
        if self._mode_api_seen:
            return
        group_version, resource, product = MODE_APIS[self.settings.mode]
        if not self.api.serves(group_version, resource):
            raise DispatchRejected(
                f"mode {self.settings.mode}: the Kubernetes API server at {self.api.address} "
                f"does not serve {group_version} {resource}; is {product} installed?"
            )
        self._mode_api_seen = True

    def _delete_job(self, name: str) -> None:
        try:
            self.api.delete_job(name, self.propagation)
        except ApiFailure as error:
            if error.code != 404:
                raise BackendUnavailable(
                    f"Kubernetes API server at {self.api.address} refused to delete Job {name} "
                    f"(HTTP {error.code}: {error.message})"
                ) from None

    def _create_rendezvous_service(self, job: Obj) -> None:
        try:
            self.api.create_service(m.rendezvous_service_manifest(job, self.settings))
        except ApiFailure as error:
            if error.code != 409:
                raise BackendUnavailable(
                    f"Kubernetes API server at {self.api.address} refused the Service of "
                    f"{job['metadata']['name']} (HTTP {error.code}: {error.message}); the "
                    "RBAC Role needs create on services"
                ) from None

    def _create_pod_group(self, job: Obj) -> None:
        try:
            self.api.create_pod_group(m.pod_group_manifest(job, self.settings))
        except ApiFailure as error:
            if error.code != 409:
                raise BackendUnavailable(
                    f"Kubernetes API server at {self.api.address} refused the PodGroup of "
                    f"{job['metadata']['name']} (HTTP {error.code}: {error.message}); is "
                    "Volcano installed?"
                ) from None


def make_kubernetes_backend(**settings: Any) -> KubernetesBackend:
    """The entry-point factory: ``factory(cluster=NAME, **settings)`` from the fleet file."""
    return KubernetesBackend(**settings)
