"""Growing a run's Indexed Job: how a non-strict gang adds replicas on Kubernetes.

A run is one Indexed batch/v1 Job whose completion index ``i`` is the run's placement ``i``.
Growing it is one merge patch of the Job: ``completions`` and ``parallelism`` together to the
grown size (an Indexed Job's ``completions`` may change only in tandem with ``parallelism``:
Kubernetes' elastic Indexed Jobs, GA since 1.31) and the placements annotation to the grown
list. The Job controller then makes a pod for each new index, which the binder puts on its
placed node (``native`` mode) or Volcano places (``volcano``; the PodGroup's ``minMember``
stays the size the run started with, which is what a non-strict gang needs).

The pod template cannot change (a Job's ``spec.template`` is immutable), so a grown pod gets
the template the run was dispatched with: its ``RANK`` (the completion index) is its own, but
``WORLD_SIZE``, ``FLOTILLA_REPLICAS`` and ``FLOTILLA_PLACEMENTS`` are the run's size when it
started. Kueue admits a Job's pod count as a whole and suspends a Job whose count changes, so
``kueue`` mode does not grow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flotilla.backends.interface import (
    BackendUnavailable,
    DispatchRejected,
    DispatchRequest,
    DispatchResult,
    ReplicaPlacement,
    check_grown_in_order,
    new_placements,
)
from flotilla.backends.kubernetes import manifests as m
from flotilla.backends.kubernetes.api import ApiFailure, KubeApi
from flotilla.backends.kubernetes.status import run_status

Obj = dict[str, Any]


def result_of_job(job: Mapping[str, Any], cluster: str) -> DispatchResult:
    """The run a Job holds, as its annotations say (the placements as grown so far)."""
    annotations = job["metadata"]["annotations"]
    return DispatchResult(
        annotations.get(m.ANNOTATION_RUN_ID, ""),
        annotations.get(m.ANNOTATION_JOB, ""),
        cluster,
        float(annotations[m.ANNOTATION_DISPATCHED_AT]),
        m.placements_from_annotation(annotations[m.ANNOTATION_PLACEMENTS]),
    )


def growth_of(
    job: Mapping[str, Any],
    pods: Sequence[Obj],
    request: DispatchRequest,
    settings: m.JobSettings,
) -> tuple[ReplicaPlacement, ...]:
    """The placements of ``request`` the Job does not have yet; refuses (naming why) a growth
    the run cannot take: other placements, a run that ended or is stopping, ``kueue`` mode."""
    existing = result_of_job(job, settings.cluster)
    added = new_placements(existing, request)
    if not added:
        return ()
    check_grown_in_order(existing, request)
    meta = job["metadata"]
    stopping = m.ANNOTATION_CANCEL_REASON in meta.get("annotations", {}) or bool(
        meta.get("deletionTimestamp")
    )
    if stopping or run_status(job, pods, settings.cluster).state.terminal:
        raise DispatchRejected(
            f"run {request.run_id} has ended or is stopping: no replica can join it"
        )
    if settings.mode == "kueue":
        raise DispatchRejected(
            "mode kueue: Kueue admits a Job's pods as a whole and suspends a Job whose size "
            "changes, so a run cannot add replicas here"
        )
    return added


def scale(api: KubeApi, job: Mapping[str, Any], request: DispatchRequest) -> Obj:
    """Patch the Job to the request's placements (``completions`` = ``parallelism`` = their
    count); the Job as the server answered."""
    name = job["metadata"]["name"]
    try:
        return api.scale_job(
            name,
            len(request.placements),
            {m.ANNOTATION_PLACEMENTS: m.placements_json(request.placements)},
        )
    except ApiFailure as error:
        if error.code == 404:
            raise DispatchRejected(f"run {request.run_id} has ended: its Job is gone") from None
        if error.code in (400, 422):
            raise DispatchRejected(f"the Job's growth was refused: {error.message}") from None
        raise BackendUnavailable(
            f"Kubernetes API server at {api.address} refused to scale Job {name} "
            f"(HTTP {error.code}: {error.message}); the RBAC Role needs patch on jobs"
        ) from None
