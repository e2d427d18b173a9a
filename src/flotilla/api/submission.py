"""Parse a submission body into job specs, naming the field of every problem.

The body is one job spec, or ``{"jobs": [spec, ...]}``. All problems of all jobs are reported
at once (``jobs[1].tasks[0].resources.cpu: must be >= 0``) so a user fixes a file in one go;
nothing reaches the store unless every job is valid. The server answers ``InvalidSubmission``
with a 422; the SDK raises it as ``InvalidSpec`` before sending anything.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from pydantic import ValidationError

from flotilla.model import JobSpec, PriorityClass
from flotilla.model.errors import from_pydantic
from flotilla.model.names import name_problems
from flotilla.model.payload import (
    PAYLOAD_TYPES,
    PayloadError,
    parse_payload,
    parse_sim_behaviour,
)
from flotilla.secrets import placeholders


class InvalidSubmission(ValueError):
    """A submission with problems: ``message`` says what, ``problems`` name each field."""

    def __init__(self, message: str, problems: Sequence[str]) -> None:
        super().__init__(message)
        self.message = message
        self.problems = list(problems)


@dataclass(frozen=True)
class SubmissionLimits:
    """Sizes a store and a scheduler can hold, so ``count: 10**30`` is refused rather than
    memory growing until it runs out; every one has a safe default (the server's are
    ``ServerLimits``, which adds limits on requests)."""

    max_count: int = 10_000
    """Jobs one spec's ``count`` may make."""
    max_replicas: int = 10_000
    """Replicas of one task."""
    max_jobs_per_submission: int = 10_000
    """Jobs in one batch (after ``count``)."""
    max_priority: int = 1_000_000_000
    """The largest ``|priority|`` (the store keeps 64-bit integers; this leaves room)."""
    max_label_bytes: int = 4096
    """Length of one label or annotation key or value, and of a cancel reason."""


def _under(prefix: str, line: str) -> str:
    if not prefix:
        return line
    if line.startswith("(top level)"):
        return prefix + line[len("(top level)") :]
    if line.startswith("["):
        return prefix + line
    return f"{prefix}.{line}"


def check_payload(spec: JobSpec) -> list[str]:
    """Problems with a job's type and payload, as the backends will see them.

    A payload holding only ``sim`` is complete for the ``sim`` backend (as that backend
    decides); a job without a payload runs there with default behaviour. Anything else is
    validated as the job type's payload model, so a typo fails now rather than at dispatch.
    """
    try:
        sim_only = spec.payload is None or set(spec.payload) <= {"sim"}
        payload = placeholders(spec.payload)  # secrets are checked when sealed
        if spec.type in PAYLOAD_TYPES and sim_only:
            parse_sim_behaviour(payload)
        else:
            parse_payload(spec.type, payload)
    except PayloadError as error:
        return error.problems
    return []


def _working_dir(spec: JobSpec) -> str | None:
    """A command job's ``payload.working_dir`` as given (container and Ray jobs name a path
    inside their image or a source to upload: not a directory of a Flotilla machine)."""
    if spec.type != "command" or not isinstance(spec.payload, Mapping):
        return None
    working_dir = spec.payload.get("working_dir")
    return working_dir if isinstance(working_dir, str) and working_dir else None


def check_working_dir(spec: JobSpec) -> list[str]:
    """A command job's ``working_dir`` is relative to its run's scratch dir: one that leaves
    it (``..``) is refused here, by the client and the server alike (the local backend
    refuses it again at dispatch)."""
    working_dir = _working_dir(spec)
    if working_dir is None or PurePosixPath(working_dir).is_absolute():
        return []
    if ".." in PurePosixPath(working_dir).parts:
        return [
            f"payload.working_dir: {working_dir!r} leaves the run's scratch dir ('..'); give "
            "a path inside it"
        ]
    return []


def absolute_working_dir_problems(spec: JobSpec, allowed: Sequence[str] | None) -> list[str]:
    """An absolute ``working_dir`` is allowed only under a directory an admin allows on some
    cluster of the fleet (``allowed_working_dirs``). ``allowed``: every cluster's entries
    together; None when not known (a cluster gives them by secret reference), and nothing is
    refused here then. The answer names no allowed directory."""
    working_dir = _working_dir(spec)
    if allowed is None or working_dir is None or not PurePosixPath(working_dir).is_absolute():
        return []
    normal = PurePosixPath(posixpath.normpath(working_dir))
    for entry in allowed:
        root = PurePosixPath(posixpath.normpath(entry))
        if root.is_absolute() and (normal == root or root in normal.parents):
            return []
    return [
        f"payload.working_dir: {working_dir!r} is an absolute path no cluster of this fleet "
        "allows; give a path relative to the run's scratch dir, or allow it: ask an admin to "
        "add its directory to a cluster's allowed_working_dirs (on your own machine: "
        f"`flotilla up --allow-working-dir {normal}`)"
    ]


def check_limits(spec: JobSpec, limits: SubmissionLimits) -> list[str]:
    """The limits on one spec (``SubmissionLimits``), and on its names (``model/names.py``:
    checked here, not in the model, so that a spec stored before keeps loading)."""
    problems: list[str] = []
    if spec.count is not None and spec.count > limits.max_count:
        problems.append(
            f"count: {spec.count} is more than this server's limit of {limits.max_count}"
        )
    if spec.array is not None and spec.array.size > limits.max_count:
        problems.append(
            f"array.size: {spec.array.size} is more than this server's limit of {limits.max_count}"
        )
    elements = spec.array.size if spec.array is not None else spec.count
    problems += name_problems(spec.name, [task.name for task in spec.tasks], elements)
    for index, task in enumerate(spec.tasks):
        if task.replicas > limits.max_replicas:
            problems.append(
                f"tasks[{index}].replicas: {task.replicas} is more than this server's limit of "
                f"{limits.max_replicas}"
            )
    if spec.priority is not None and abs(spec.priority) > limits.max_priority:
        problems.append(
            f"priority: must be between -{limits.max_priority} and {limits.max_priority}"
        )
    for field, labels in (("labels", spec.labels), ("annotations", spec.annotations)):
        for key, value in labels.items():
            if len(key) > limits.max_label_bytes or len(value) > limits.max_label_bytes:
                problems.append(
                    f"{field}.{key[:64]}: longer than {limits.max_label_bytes} characters"
                )
    return problems


def check_service_fields(
    spec: JobSpec, priority_classes: Mapping[str, PriorityClass] | None = None
) -> list[str]:
    """Scenario fields that mean nothing to a running service: refused, never ignored.

    ``priority_classes`` are the fleet's; ``None`` when they are not known here (a client
    checking a file before sending it), and the server checks the class."""
    problems: list[str] = []
    if spec.submit_at != 0:
        problems.append("submit_at: only meaningful in a simulation scenario")
    for scenario_only in ("cancel_at", "hold_at", "release_at"):
        if getattr(spec, scenario_only) is not None:
            problems.append(f"{scenario_only}: only meaningful in a simulation scenario")
    if (
        priority_classes is not None
        and spec.priority_class is not None
        and spec.priority_class not in priority_classes
    ):
        # An unknown class would silently mean priority 0 and preemptible, which is worse
        # than a clear refusal.
        if priority_classes:
            known = ", ".join(sorted(priority_classes))
            problems.append(
                f"priority_class: unknown priority class {spec.priority_class!r} (the fleet "
                f"has {known})"
            )
        else:
            problems.append(
                "priority_class: this server has no priority classes (a fleet file defines "
                "them); give priority (and preemptible) instead"
            )
    return problems


def with_priority_class(
    spec: JobSpec, priority_classes: Mapping[str, PriorityClass] | None
) -> JobSpec:
    """A job naming a priority class of the fleet gets its value and preemptibility (its own
    ``preemptible`` wins), as the simulator gives them."""
    found = (priority_classes or {}).get(spec.priority_class or "")
    if found is None:
        return spec
    preemptible = spec.preemptible if spec.preemptible is not None else found.preemptible
    return spec.model_copy(
        update={"priority": found.value, "priority_class": None, "preemptible": preemptible}
    )


def parse_job(
    data: Any,
    prefix: str,
    limits: SubmissionLimits | None = None,
    priority_classes: Mapping[str, PriorityClass] | None = None,
) -> tuple[JobSpec | None, list[str]]:
    if not isinstance(data, Mapping):
        return None, [f"{prefix or '(top level)'}: expected a job (a mapping)"]
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as error:
        return None, [_under(prefix, line) for line in from_pydantic(error).problems]
    problems = check_service_fields(spec, priority_classes) + check_payload(spec)
    problems += check_working_dir(spec)
    problems += check_limits(spec, limits or SubmissionLimits())
    return with_priority_class(spec, priority_classes), [_under(prefix, line) for line in problems]


def parse_submission(
    body: Any,
    limits: SubmissionLimits | None = None,
    priority_classes: Mapping[str, PriorityClass] | None = None,
    pace: Callable[[], None] | None = None,
) -> tuple[list[JobSpec], list[str]]:
    """The specs and, per spec, the path prefix of its fields (``jobs[2]`` or ``""``).

    Raises ``InvalidSubmission`` listing every problem. Without ``priority_classes`` (a
    client) a job's priority class is left for the server to check. ``pace`` is called
    before each job (the server's ``Precedence.pace``: a large batch lets reads go first).
    """
    limits = limits or SubmissionLimits()
    if isinstance(body, Mapping) and "jobs" in body:
        extra = sorted(str(key) for key in body if key != "jobs")
        problems = [f"{key}: unknown field (a batch holds only 'jobs')" for key in extra]
        items = body["jobs"]
        if not isinstance(items, list) or not items:
            raise InvalidSubmission(
                "invalid submission", ["jobs: must be a non-empty list of jobs"]
            )
        if len(items) > limits.max_jobs_per_submission:
            raise InvalidSubmission(
                "invalid submission",
                [f"jobs: more than this server's limit of {limits.max_jobs_per_submission}"],
            )
        prefixes = [f"jobs[{index}]" for index in range(len(items))]
    else:
        problems, items, prefixes = [], [body], [""]
    specs: list[JobSpec] = []
    for item, prefix in zip(items, prefixes, strict=True):
        if pace is not None:
            pace()
        spec, found = parse_job(item, prefix, limits, priority_classes)
        problems.extend(found)
        if spec is not None:
            specs.append(spec)
    total = sum(len(spec.job_names()) for spec in specs) if not problems else 0
    if total > limits.max_jobs_per_submission:
        problems.append(
            f"(top level): {total} jobs in one submission; this server's limit is "
            f"{limits.max_jobs_per_submission}"
        )
    if problems:
        raise InvalidSubmission("invalid job spec", problems)
    return specs, prefixes
