"""The last output of pods that are being deleted, kept after their logs are gone.

A pod's log lives as long as the pod: a cancel deletes the pods, and so does the Job
controller at ``activeDeadlineSeconds`` (``max_runtime``) and when one replica of a gang fails.
The backend reads the tail of each such pod's log before it deletes it (cancel) and when it sees
a pod being deleted or ended while deleted (the watch), and serves that copy once the pod is
gone. Bounded: the last ``TAIL_LINES`` lines, at most ``TAIL_BYTES`` per pod, ``TOTAL_BYTES`` in
all (the oldest copies go first). In memory only: a restarted scheduler has no copy.

Copies are kept by the Job's uid (and the completion index), not by the run id: a Job of the
same name — the same run dispatched again — may still have a pod terminating, and its output
is not the new Job's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from flotilla.backends.interface import BackendUnavailable
from flotilla.backends.kubernetes import manifests as m
from flotilla.backends.kubernetes.api import KubeApi

Obj = dict[str, Any]
TAIL_LINES = 1000
TAIL_BYTES = 256 * 1024
TOTAL_BYTES = 64 * 2**20


class KeptOutput:
    """Copies of deleted pods' output by (Job uid, completion index). Thread-safe."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._lock = threading.Lock()
        self._copies: OrderedDict[tuple[str, int], tuple[str, bool, bytes]] = OrderedDict()
        """(Job uid, index) -> (pod uid, read after the container ended, the tail)."""
        self._size = 0
        self._jobs: dict[str, str] = {}
        """Run id -> the uid of its newest Job the backend has read (``bind``)."""

    def bind(self, run_id: str, job_uid: str) -> None:
        """``job_uid`` is run ``run_id``'s Job now: its copies are the run's output."""
        with self._lock:
            self._jobs[run_id] = job_uid

    def keep(self, pod: Obj) -> None:
        """Read and keep the tail of ``pod``'s log, unless a copy read after its container
        ended is kept already (a copy read while it ran is read again: it may have printed
        more while it stopped)."""
        key = _key(pod)
        if key is None:
            return
        ended = _ended(pod)
        uid = str(pod["metadata"].get("uid", ""))
        with self._lock:
            old = self._copies.get(key)
            if old is not None and old[0] == uid and (old[1] or not ended):
                return
        try:
            data = self.api.pod_log(pod["metadata"]["name"], TAIL_BYTES, tail_lines=TAIL_LINES)
        except BackendUnavailable:
            return  # the server is away: no copy, as before this existed
        with self._lock:
            old = self._copies.pop(key, None)
            if old is not None:
                self._size -= len(old[2])
                if not data and old[0] == uid:
                    data = old[2]  # the pod went between the two reads: keep the first
            self._copies[key] = (uid, ended, data)
            self._size += len(data)
            while self._size > TOTAL_BYTES and self._copies:
                _, (_, _, dropped) = self._copies.popitem(last=False)
                self._size -= len(dropped)

    def get(self, run_id: str, index: int) -> bytes | None:
        """The copy of replica ``index`` of the run's newest Job (``bind``), if kept."""
        with self._lock:
            job_uid = self._jobs.get(run_id)
            found = None if job_uid is None else self._copies.get((job_uid, index))
            return None if found is None else found[2]


def deleting(pod: Obj) -> bool:
    """A pod asked to stop (cancel, deadline, a gang's failure) that has not yet gone."""
    return bool(pod["metadata"].get("deletionTimestamp"))


def _key(pod: Obj) -> tuple[str, int] | None:
    meta = pod["metadata"]
    job_uid = meta.get("labels", {}).get(m.CONTROLLER_UID_LABEL)
    index = meta.get("labels", {}).get(m.INDEX_LABEL) or meta.get("annotations", {}).get(
        m.INDEX_ANNOTATION
    )
    if job_uid is None or index is None:
        return None
    return str(job_uid), int(index)


def _ended(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
