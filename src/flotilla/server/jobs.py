"""Job routes: submit (one or a batch, all or nothing), list, show, cancel, reprioritize."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool

from flotilla.api.schemas import (
    LABEL_KEY,
    MAX_LABEL_FILTERS,
    MAX_REASON,
    BulkCancelBody,
    CancelBody,
    CancelResult,
    Dependency,
    GangMembers,
    Job,
    JobDetail,
    JobList,
    PriorityBody,
    SubmitResult,
    SubmittedJob,
)
from flotilla.api.submission import InvalidSubmission, parse_submission
from flotilla.lifecycle import gangs
from flotilla.lifecycle.dependencies import accepts
from flotilla.model import JobSpec, PriorityClass
from flotilla.secrets import SecretError, has_secrets
from flotilla.server.auth import ANONYMOUS, Permission, User
from flotilla.server.context import (
    Caller,
    Context,
    ServerContext,
    find_job,
    require,
    require_read,
)
from flotilla.server.errors import ApiError
from flotilla.server.feasibility import (
    fleet_shapes,
    growth_problems,
    unfit_problems,
    whole_gpu_problems,
)
from flotilla.server.requests_first import is_bulk
from flotilla.server.whatif import start_estimate, start_unknown
from flotilla.server.working_dirs import check_working_dirs
from flotilla.service.dependencies import Verdict, dependency_status
from flotilla.stage_trace import trace
from flotilla.store import (
    ACTIVE_JOB_STATES,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    InvalidDependencyError,
    JobRecord,
    JobState,
    NotFoundError,
)
from flotilla.tracing import job_ids, tracer

router = APIRouter(prefix="/v1", tags=["jobs"])

MAX_CURSOR = 2**62
"""Cursors are serials: far below this, and far below what a 64-bit column holds."""

LABEL_FILTER = LABEL_KEY.removesuffix("$") + "=.*$"

SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": 'One job spec, or {"jobs": [spec, ...]} stored all or nothing.',
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/JobSpec"},
                        {
                            "type": "object",
                            "properties": {
                                "jobs": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {"$ref": "#/components/schemas/JobSpec"},
                                }
                            },
                            "required": ["jobs"],
                            "additionalProperties": False,
                        },
                    ]
                }
            }
        },
    }
}


def _check_queues(context: ServerContext, specs: list[JobSpec], prefixes: list[str]) -> None:
    known = {queue.name for queue in context.store.list_queues()}
    problems = [
        f"{prefix + '.' if prefix else ''}queue: no such queue {spec.queue!r}"
        for spec, prefix in zip(specs, prefixes, strict=True)
        if spec.queue not in known
    ]
    if problems:
        raise ApiError(400, "unknown queue; nothing was submitted", problems)


def _check_fit(
    context: ServerContext,
    specs: list[JobSpec],
    prefixes: list[str],
    pace: Callable[[], None] | None = None,
) -> None:
    """422 for jobs no cluster of the fleet could ever hold, unless they ask to be held."""
    if all(spec.hold_if_unfit for spec in specs):
        return
    clusters = fleet_shapes(context.store.list_clusters())
    problems: list[str] = []
    for spec, prefix in zip(specs, prefixes, strict=True):
        if pace is not None:
            pace()  # a large batch lets reads go first
        problems.extend(
            f"{prefix + '.' if prefix else ''}{line}" for line in unfit_problems(spec, clusters)
        )
    if problems:
        raise ApiError(
            422,
            "no cluster of the fleet could ever run this job; nothing was submitted (give "
            "hold_if_unfit: true, or flotilla submit --hold-if-unfit, to keep it queued for "
            "a fleet that will grow)",
            problems,
        )


def _check_growth(context: ServerContext, specs: list[JobSpec], prefixes: list[str]) -> None:
    """422 for a non-strict gang that could never grow on this fleet (``growth_problems``):
    it would run with the replicas it started with, forever."""
    if not any(gangs.may_grow(spec) for spec in specs):
        return
    records = context.store.list_clusters()
    problems = [
        f"{prefix + '.' if prefix else ''}{line}"
        for spec, prefix in zip(specs, prefixes, strict=True)
        for line in growth_problems(spec, records)
    ]
    if problems:
        raise ApiError(
            422, "a non-strict gang could never grow on this fleet; nothing was submitted", problems
        )


def _check_gpu_shares(context: ServerContext, specs: list[JobSpec], prefixes: list[str]) -> None:
    """422 for a share of a GPU that only whole-device clusters could hold
    (``whole_gpu_problems``): it would be refused at dispatch, or wait for ever."""
    if not any(task.resources.get("gpu", 0.0) % 1 > 0 for spec in specs for task in spec.tasks):
        return
    records = context.store.list_clusters()
    problems = [
        f"{prefix + '.' if prefix else ''}{line}"
        for spec, prefix in zip(specs, prefixes, strict=True)
        for line in whole_gpu_problems(spec, records)
    ]
    if problems:
        raise ApiError(
            422, "a share of a GPU could never run on this fleet; nothing was submitted", problems
        )


def _check_dependency_access(
    context: ServerContext, user: User, specs: list[JobSpec], prefixes: list[str]
) -> None:
    """A dependency on a job of another queue needs read access to that job: its name and
    state show in the dependent's ``why``. ``QUEUE/NAME`` needs ``read`` on the queue (403
    naming it; queue names are no secret); a job id the caller may not read is refused as
    an id that names no job is (400 naming the field), so the answer does not reveal it."""
    batch = {(spec.queue, name) for spec in specs for name in spec.job_names()}
    problems: list[str] = []
    for spec, prefix in zip(specs, prefixes, strict=True):
        for position, dependency in enumerate(spec.depends_on):
            queue, slash, _ = dependency.job.rpartition("/")
            if slash:
                if queue != spec.queue:
                    require(user, Permission.READ, queue)
                continue
            if (spec.queue, dependency.job) in batch:
                continue
            try:
                record = context.store.get_job(dependency.job)  # an id, if it is one
            except NotFoundError:
                continue
            if record.queue != spec.queue and not user.may_read(record.queue, record.owner or ""):
                problems.append(
                    f"{prefix + '.' if prefix else ''}depends_on[{position}].job: no job named "
                    f"{dependency.job!r} in queue {spec.queue!r}, and no job with that id (name "
                    "a job of another queue as QUEUE/NAME)"
                )
    if problems:
        raise InvalidDependencyError(list(dict.fromkeys(problems)))


def _priority_classes(context: ServerContext) -> dict[str, PriorityClass]:
    """The fleet's priority classes (none without a fleet)."""
    record = context.store.get_fleet()
    if record is None:
        return {}
    return {
        item["name"]: PriorityClass.model_validate(item)
        for item in record.document.get("priority_classes", [])
    }


def _parse_body(
    context: ServerContext, body: bytes, pace: Callable[[], None] | None
) -> tuple[list[JobSpec], list[str]]:
    """The submission's specs, validated and with their secrets sealed, and their prefixes."""
    try:
        document = json.loads(body)
    except ValueError as error:
        raise ApiError(400, f"the body is not valid JSON: {error}") from None
    classes = _priority_classes(context)
    try:
        specs, prefixes = parse_submission(document, context.limits, classes, pace=pace)
    except InvalidSubmission as error:
        raise ApiError(422, error.message, error.problems) from None
    return seal_secrets(context, specs, prefixes), prefixes


@router.post("/jobs", status_code=201, openapi_extra=SUBMIT_BODY)
async def submit_jobs(request: Request, context: Context, user: Caller) -> SubmitResult:
    """Submit one job or a batch. Every job is validated first; then all are stored in one
    transaction, or none (unknown queue: 400, name taken in its queue: 409)."""
    # Parsed and validated on a worker thread: a batch of 1,000 jobs is ~150 ms of Python,
    # during which the event loop would answer no other request (docs/performance.md).
    # A large batch is bulk work (``requests_first.py``): it paces itself between jobs, so a
    # GET or a cancel is not held up by it; a small one is urgent itself and never waits.
    pace = context.precedence.pace if is_bulk(request.scope) else None
    specs, prefixes = await run_in_threadpool(_parse_body, context, await request.body(), pace)
    for queue in sorted({spec.queue for spec in specs}):
        require(user, Permission.SUBMIT, queue)
    await run_in_threadpool(_check_queues, context, specs, prefixes)
    await run_in_threadpool(check_working_dirs, context, specs, prefixes)
    await run_in_threadpool(_check_dependency_access, context, user, specs, prefixes)
    await run_in_threadpool(_check_fit, context, specs, prefixes, pace)
    await run_in_threadpool(_check_growth, context, specs, prefixes)
    await run_in_threadpool(_check_gpu_shares, context, specs, prefixes)
    owner = None if user is ANONYMOUS else user.name  # a token's name, the local token's user
    with tracer().start_as_current_span("flotilla.submit") as span:
        ids = await run_in_threadpool(context.store.submit_jobs, specs, owner=owner, pace=pace)
        span.set_attributes(
            {**job_ids(ids), "flotilla.queues": sorted({spec.queue for spec in specs})}
        )
    context.wake()
    named = [(spec.queue, name) for spec in specs for name in spec.job_names()]
    arrays = await run_in_threadpool(array_ids, context, specs, ids)
    jobs = [
        SubmittedJob(id=job_id, name=name, queue=queue, array_id=arrays.get(job_id))
        for job_id, (queue, name) in zip(ids, named, strict=True)
    ]
    return SubmitResult(ids=ids, jobs=jobs)


def array_ids(context: ServerContext, specs: list[JobSpec], ids: list[str]) -> dict[str, str]:
    """Job id → array id for the elements of the arrays just submitted (one read per array)."""
    found: dict[str, str] = {}
    start = 0
    for spec in specs:
        size = len(spec.job_names())
        if spec.array is not None:
            array_id = context.store.get_job(ids[start]).array_id
            if array_id is not None:
                found.update((job_id, array_id) for job_id in ids[start : start + size])
        start += size
    return found


def seal_secrets(
    context: ServerContext, specs: list[JobSpec], prefixes: list[str]
) -> list[JobSpec]:
    """Encrypt the secret env values of every job before anything is stored (see
    ``flotilla.secrets``); 422 naming each bad one."""
    problems: list[str] = []
    sealed: list[JobSpec] = []
    for spec, prefix in zip(specs, prefixes, strict=True):
        where = f"{prefix}.payload" if prefix else "payload"
        if not has_secrets(spec.payload):
            sealed.append(spec)
        elif context.secrets is None:
            problems.append(f"{where}.env: this server has no secret key to store secrets")
        else:
            try:
                sealed.append(
                    spec.model_copy(update={"payload": context.secrets.seal(spec.payload, where)})
                )
            except SecretError as error:
                problems.extend(error.problems)
    if problems:
        raise ApiError(422, "invalid job spec", problems)
    return sealed


def parse_labels(pairs: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ApiError(
                400, "invalid label filter", [f"label: expected key=value, got {pair!r}"]
            )
        labels[key] = value
    return labels


@router.get("/jobs")
def list_jobs(
    context: Context,
    user: Caller,
    queue: Annotated[str | None, Query(max_length=253)] = None,
    state: Annotated[list[JobState] | None, Query(description="Repeat for several.")] = None,
    owner: Annotated[str | None, Query(max_length=253)] = None,
    label: Annotated[
        list[Annotated[str, StringConstraints(pattern=LABEL_FILTER, max_length=MAX_REASON)]] | None,
        Query(description="key=value; repeat: all match.", max_length=MAX_LABEL_FILTERS),
    ] = None,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_CURSOR, description="A page's next_cursor.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    name: Annotated[
        str | None, Query(max_length=200, description="Part of the name (any case).")
    ] = None,
    order: Annotated[
        Literal["oldest", "newest"],
        Query(description="newest: newest first; `after` then pages to older jobs."),
    ] = "oldest",
    total: Annotated[
        bool, Query(description="Also count every match over all pages (`total`).")
    ] = False,
    starts: Annotated[
        bool,
        Query(
            description="Give each waiting job its `estimated_start` or `start_unknown` (as "
            "`squeue --start`)."
        ),
    ] = False,
) -> JobList:
    """Jobs in submission order, filtered, a page at a time (keyset: stable under submits).
    Without ``read`` on the queue asked for (or on ``*``), only the caller's own jobs. An
    unknown queue is a 404 (an empty list would hide a typo)."""
    if queue is not None:
        context.store.get_queue(queue)  # NotFoundError: 404 naming it
    if not (user.can_read_all() or (queue is not None and user.can(Permission.READ, queue))):
        if owner is not None and owner != user.name:
            raise ApiError(
                403,
                f"user {user.name!r} may list only their own jobs here: give a queue they "
                "have the 'read' permission on",
            )
        owner = user.name
    filters: dict[str, Any] = {
        "queue": queue,
        "states": state,
        "owner": owner,
        "labels": parse_labels(label),
        "name_contains": name,
    }
    page = context.store.list_jobs(
        **filters, after=after, limit=limit, newest_first=order == "newest"
    )
    listed = [Job.from_record(job, pending_reason(context, job)) for job in page.jobs]
    if starts:
        listed = [
            item.model_copy(
                update={
                    "estimated_start": start_estimate(context, record),
                    "start_unknown": start_unknown(context, record),
                }
            )
            for item, record in zip(listed, page.jobs, strict=True)
        ]
    return JobList(
        jobs=listed,
        next_cursor=page.next_cursor,
        total=context.store.count_jobs(**filters) if total else None,
    )


def pending_reason(context: ServerContext, job: JobRecord) -> str | None:
    if job.state not in WAITING_JOB_STATES:
        return None
    waiting, _ = unmet_dependencies(context, job)
    if waiting is not None:
        return waiting
    live = context.scheduler.pending_reason(job.id) if context.scheduler is not None else None
    return live or job.reason


JobReference = Annotated[
    str,
    Path(
        max_length=600,
        description="A job id, an unambiguous id prefix, `ARRAY_INDEX` (an array element, "
        "as Slurm's `JOBID_TASKID`), or a name one queue uses (its latest job); "
        "`GET /v1/queues/{queue}/jobs/{name}` names one in a given queue.",
    ),
]


def _detail(context: ServerContext, job: JobRecord) -> JobDetail:
    detail = JobDetail.build(
        job, context.store.runs(job.id), pending_reason(context, job), gang_members(context, job)
    )
    estimate = start_estimate(context, job)
    return detail.model_copy(
        update={"estimated_start": estimate, "start_unknown": start_unknown(context, job)}
    )


def gang_members(context: ServerContext, job: JobRecord) -> GangMembers | None:
    """An active non-strict gang's replicas placed and wanted, and (from the scheduler
    attached here) why the rest wait."""
    if job.run is None or job.state not in ACTIVE_JOB_STATES or not gangs.may_grow(job.spec):
        return None
    placed = len(job.run.assignment.get("placements", []))
    wanted = gangs.wanted_replicas(job.spec)
    waiting = None
    if placed < wanted:
        live = context.scheduler.pending_reason(job.id) if context.scheduler is not None else None
        waiting = live or gangs.members_wait_reason(placed, wanted, "not placed yet")
    return GangMembers(placed=placed, wanted=wanted, waiting=waiting)


def unmet_dependencies(
    context: ServerContext, job: JobRecord
) -> tuple[str | None, list[Dependency]]:
    """For a queued job held by its dependencies: what it waits for (as the scheduler words
    it) and those not met yet with their states; ``(None, [])`` otherwise. Read from the
    store, so a server without a scheduler answers too."""
    if job.state is not JobState.QUEUED or not job.dependencies:
        return None, []
    found: dict[str, JobRecord | None] = {}
    for dependency in job.dependencies:
        try:
            found[dependency.job_id] = context.store.get_job(dependency.job_id)
        except NotFoundError:
            found[dependency.job_id] = None
    status = dependency_status(job.dependencies, found)
    if status.verdict is Verdict.MET:
        return None, []
    unmet = [
        Dependency.from_record(item, None if record is None else record.state.value)
        for item in job.dependencies
        if (record := found[item.job_id]) is None or not accepts(item.condition, record.state.value)
    ]
    return status.reason, unmet


@router.get("/jobs/{job_id}")
def get_job(job_id: JobReference, context: Context, user: Caller) -> JobDetail:
    """One job in full; ambiguous references are a 409 listing the candidates."""
    job = find_job(context, user, job_id)
    require_read(user, job)
    return _detail(context, job)


@router.get("/queues/{queue}/jobs/{name}", tags=["jobs"])
def get_named_job(queue: str, name: str, context: Context, user: Caller) -> JobDetail:
    """The latest job of that name in the queue (a finished job's name may be used again)."""
    job = find_job(context, user, f"{queue}/{name}")
    require_read(user, job)
    return _detail(context, job)


def may_cancel(user: User, job: JobRecord) -> bool:
    """Anyone's job with ``cancel`` on its queue; one's own with ``submit``."""
    own = job.owner is not None and job.owner == user.name
    return user.can(Permission.CANCEL, job.queue) or (
        own and user.can(Permission.SUBMIT, job.queue)
    )


def require_cancel(user: User, job: JobRecord) -> None:
    if not may_cancel(user, job):
        require(user, Permission.CANCEL, job.queue)


@router.post("/jobs/cancel")
def cancel_jobs(body: BulkCancelBody, context: Context, user: Caller) -> CancelResult:
    """Cancel every unfinished job of a queue and/or carrying all the given labels that the
    caller may see (jobs it may not read are not matched: a 403 would say they exist). If
    the caller may not cancel one of them, none is cancelled (403)."""
    if body.queue is None and not body.labels:
        raise ApiError(400, "give a queue and/or labels: refusing to cancel every job")
    states = [state for state in JobState if state not in TERMINAL_JOB_STATES]
    targets: list[JobRecord] = []
    after: int | None = None
    while True:
        page = context.store.list_jobs(
            queue=body.queue, states=states, labels=body.labels, after=after, limit=1000
        )
        targets.extend(
            job
            for job in page.jobs
            if not job.cancel_requested and user.may_read(job.queue, job.owner or "")
        )
        if page.next_cursor is None:
            break
        after = page.next_cursor
    for job in targets:
        require_cancel(user, job)
    records = context.store.cancel_many([job.id for job in targets], body.reason)
    context.cancelled(records)
    done = [job for job in records if job.state is JobState.CANCELLED or job.cancel_requested]
    return CancelResult(cancelled=[Job.from_record(job) for job in done])


@router.post("/jobs/{job_id}/cancel")
def cancel_job(
    job_id: JobReference,
    context: Context,
    user: Caller,
    body: Annotated[CancelBody | None, Body()] = None,
) -> Job:
    """A waiting job is cancelled at once; a running one is asked to stop
    (``cancel_requested``) and becomes cancelled when its run has ended. Idempotent."""
    trace("api-received", job_id)
    job = find_job(context, user, job_id)
    require_cancel(user, job)
    reason = (body or CancelBody()).reason
    record = context.store.cancel(job.id, reason)
    trace("store-written", job.id)
    context.cancelled([record])
    return Job.from_record(record)


@router.post("/jobs/{job_id}/priority")
def set_priority(job_id: JobReference, body: PriorityBody, context: Context, user: Caller) -> Job:
    """Change a waiting job's priority (needs ``admin`` on its queue); 409 if it runs."""
    job = find_job(context, user, job_id)
    require(user, Permission.ADMIN, job.queue)
    record = context.store.set_priority(job.id, body.priority, body.reason)
    context.wake()
    return Job.from_record(record)
