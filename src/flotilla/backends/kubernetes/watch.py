"""The cluster's Jobs and pods, kept current by list + watch; new pods bound to their nodes.

Each kind has a thread that lists (label selector of the cluster), then watches from the
list's ``resourceVersion``; an ``ERROR`` event (``410 Gone``: the version is too old), a broken
connection or an unreachable server makes it list again after a short pause. In ``native``
mode every pod that appears unbound, with Flotilla's ``schedulerName``, is bound to the node
its completion index was placed on — by whichever backend object sees it first (a 409 from a
second binder is fine), which is how a fresh object finishes what a dead one began.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from flotilla.backends.interface import BackendUnavailable, ReplicaPlacement
from flotilla.backends.kubernetes import manifests as m
from flotilla.backends.kubernetes.api import ApiFailure, KubeApi

log = logging.getLogger(__name__)

Obj = dict[str, Any]
KINDS = ("jobs", "pods")


class ClusterWatch:
    """A cache of the cluster's Jobs and pods, and the binder of new pods."""

    def __init__(
        self,
        api: KubeApi,
        selector: str,
        settings: m.JobSettings,
        watch_timeout: int,
        on_deleting: Callable[[Obj], None] = lambda pod: None,
    ) -> None:
        self.api = api
        self.on_deleting = on_deleting
        """Called with each pod seen with a deletion timestamp (its output is read then)."""
        self.selector = selector
        self.settings = settings
        self.watch_timeout = watch_timeout
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._cache: dict[str, dict[str, Obj]] = {kind: {} for kind in KINDS}
        self._synced = {kind: threading.Event() for kind in KINDS}
        self._bound: set[str] = set()
        self._threads = [
            threading.Thread(target=self._watch_loop, args=(kind,), daemon=True, name=kind)
            for kind in KINDS
        ]
        for thread in self._threads:
            thread.start()

    def snapshot(self) -> tuple[list[Obj], list[Obj]] | None:
        """Jobs and pods as last seen, or ``None`` while a watch is not in sync."""
        with self._lock:
            if not all(event.is_set() for event in self._synced.values()):
                return None
            return list(self._cache["jobs"].values()), list(self._cache["pods"].values())

    def remember_job(self, job: Obj) -> None:
        """A Job just created: known before its watch event arrives."""
        with self._lock:
            self._cache["jobs"].setdefault(job["metadata"]["name"], job)

    def stop(self) -> None:
        """Ask the threads to end; a thread inside a watch request ends when it returns (at
        most ``watch_timeout``), without touching anything on the way out."""
        self.closed.set()

    def bind(self, pod: Obj) -> None:
        """Put a new pod on the node its completion index was placed on (native mode)."""
        meta, spec = pod["metadata"], pod.get("spec", {})
        name = meta["name"]
        if (
            self.settings.mode != "native"
            or spec.get("nodeName")
            or meta.get("deletionTimestamp")
            or spec.get("schedulerName") != self.settings.scheduler_name
            or name in self._bound
        ):
            return
        job_name = meta.get("labels", {}).get(m.JOB_NAME_LABEL)
        index = meta.get("labels", {}).get(m.INDEX_LABEL) or meta.get("annotations", {}).get(
            m.INDEX_ANNOTATION
        )
        if job_name is None or index is None:
            return
        with self._lock:
            job = self._cache["jobs"].get(job_name)
        placements = self._placements(job, job_name, meta)
        if placements is not None and int(index) >= len(placements):
            # A pod of a grown Job may come before the Job's own event: read it again.
            placements = self._placements(None, job_name, meta)
        if placements is None or int(index) >= len(placements):
            return
        node = placements[int(index)].node
        try:
            self.api.bind(m.binding_manifest(name, self.settings.namespace, node))
        except ApiFailure as error:
            if error.code not in (404, 409):  # gone, or bound by another replica: fine
                log.warning("binding pod %s to node %s failed: %s", name, node, error)
                return
        self._bound.add(name)

    def _placements(
        self, job: Obj | None, job_name: str, pod_meta: Obj
    ) -> tuple[ReplicaPlacement, ...] | None:
        """The placements of the pod's Job (``job``, or read from the server), or ``None``
        when the pod is not of that Job (another Job of the name, one being deleted)."""
        if job is None:
            job = self.api.get_job(job_name)
        owner = pod_meta.get("labels", {}).get(m.CONTROLLER_UID_LABEL)
        if job is None or (owner is not None and owner != job["metadata"].get("uid")):
            return None
        return m.placements_from_annotation(job["metadata"]["annotations"][m.ANNOTATION_PLACEMENTS])

    # --- the watch threads ---

    def _watch_loop(self, kind: str) -> None:
        """List, then watch from the list's resourceVersion; on any error or 410, list again."""
        while not self.closed.is_set():
            try:
                listed = (
                    self.api.list_jobs(self.selector)
                    if kind == "jobs"
                    else self.api.list_pods(self.selector)
                )
                with self._lock:
                    self._cache[kind] = {item["metadata"]["name"]: item for item in listed["items"]}
                    self._synced[kind].set()
                if kind == "pods":
                    for pod in listed["items"]:
                        self._pod_seen(pod)
                version = listed["metadata"]["resourceVersion"]
                while not self.closed.is_set():
                    version = self._watch_once(kind, version)
            except _Resync:
                continue
            except BackendUnavailable as error:
                self._synced[kind].clear()
                if self.closed.is_set():
                    return
                log.debug("watch of %s interrupted: %s", kind, error)
                self.closed.wait(0.5)
            except Exception:  # a bug must not kill the watch for good; log it and relist
                self._synced[kind].clear()
                if self.closed.is_set():
                    return  # the API client was closed under a running watch
                log.exception("watch of %s failed", kind)
                self.closed.wait(0.5)

    def _watch_once(self, kind: str, version: str) -> str:
        for event in self.api.watch(kind, self.selector, version, self.watch_timeout):
            if self.closed.is_set():
                return version
            kind_of_event = event.get("type")
            item = event.get("object", {})
            if kind_of_event == "ERROR":
                raise _Resync()
            version = item.get("metadata", {}).get("resourceVersion", version)
            if kind_of_event == "BOOKMARK":
                continue
            name = item["metadata"]["name"]
            with self._lock:
                if kind_of_event == "DELETED":
                    self._cache[kind].pop(name, None)
                    self._bound.discard(name)
                else:
                    self._cache[kind][name] = item
            if kind == "pods" and kind_of_event in ("ADDED", "MODIFIED"):
                self._pod_seen(item)
        return version

    def _pod_seen(self, pod: Obj) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            self.on_deleting(pod)
        else:
            self.bind(pod)


class _Resync(Exception):
    """The watch said ERROR (410 Gone: the version is too old): list again."""
