"""``flotilla.Client``: the REST API from Python, synchronously. ``flotilla.AsyncClient``
(``flotilla.sdk.aio``) has the same methods as coroutines and async iterators."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from flotilla.api.schemas import (
    ArrayDetail,
    Cluster,
    EngineIds,
    Event,
    Job,
    JobDetail,
    JobList,
    Node,
    Report,
    RunUseReport,
    SubmitResult,
    Why,
)
from flotilla.sdk import calls
from flotilla.sdk.calls import Call, JobFilter, LogOutput, LogReader, LogSelection, Waiting
from flotilla.sdk.connection import POLL, http_settings, server_address
from flotilla.sdk.errors import Unreachable, WaitTimeout

if TYPE_CHECKING:
    from flotilla.model import QueueSpec, QuotaSpec
    from flotilla.sdk.jobfile import Submission

T = TypeVar("T")


class Client:
    """A Flotilla server's API. Jobs are named by id, unambiguous id prefix, name (the
    latest job of that name) or ``QUEUE/NAME``. Every refusal raises a
    ``flotilla.FlotillaError`` subclass carrying the server's message and problems.

    ``http`` replaces the HTTP client (its base URL and headers are then its own): tests
    pass one bound to the ASGI app. Use as a context manager, or call ``close``.
    """

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        self.server = server_address(server)
        self.http = http or httpx.Client(**http_settings(self.server, token, timeout))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def call(self, call: Call[T]) -> T:
        """Send one request; its answer read, or the error it stands for raised."""
        try:
            response = self.http.request(call.method, call.path, params=call.params, json=call.body)
        except httpx.TransportError as error:
            raise Unreachable(
                f"cannot reach the Flotilla server at {self.server}: {error}"
            ) from None
        return calls.answer(call, response.status_code, response.reason_phrase, response.content)

    # Jobs -----------------------------------------------------------------------------------
    def submit(self, jobs: Submission) -> SubmitResult:
        """Submit a spec (mapping or ``JobSpec``), a list of them, or a job file's path: all
        or nothing. Checked here first (``InvalidSpec``), then by the server."""
        from flotilla.sdk import jobfile

        return self.call(calls.submit(jobfile.submission_body(jobs)))

    def get(self, job: str) -> JobDetail:
        """One job in full: spec, runs, and why it waits if it does."""
        return self.call(calls.get_job(job))

    def job_id(self, job: str) -> str:
        """The full id of the job a reference names (one request unless ``QUEUE/NAME``)."""
        return self.get(job).id if "/" in job else job

    def list(
        self, where: JobFilter | None = None, *, page_size: int = 100, limit: int | None = None
    ) -> Iterator[Job]:
        """Every job ``where`` matches (default: all), page after page, up to ``limit``."""
        after: int | None = None
        given = 0
        while limit is None or given < limit:
            size = page_size if limit is None else min(page_size, limit - given)
            page = self.page(where, after=after, limit=size)
            for job in page.jobs:
                given += 1
                yield job
            after = page.next_cursor
            if after is None:
                return

    def page(
        self,
        where: JobFilter | None = None,
        *,
        after: int | None = None,
        limit: int = 100,
        total: bool = False,
        starts: bool = False,
    ) -> JobList:
        """One page of jobs (``total``: with the count of every match; ``starts``: each
        waiting job's estimated start, or why it has none)."""
        return self.call(calls.list_page(where or JobFilter(), after, limit, total, starts))

    def cancel(self, job: str, reason: str = "cancelled by user") -> Job:
        """A waiting job is cancelled at once; a running one is asked to stop."""
        return self.call(calls.cancel(self.job_id(job), reason))

    def array(self, array_id: str) -> ArrayDetail:
        """A job array as one: its elements and their counts by state."""
        return self.call(calls.array(array_id))

    def cancel_array(self, array_id: str, reason: str = "cancelled by user") -> builtins.list[Job]:
        """Every unfinished element of the array (running ones are asked to stop)."""
        return (self.call(calls.cancel_array(array_id, reason))).cancelled

    def cancel_matching(
        self,
        *,
        queue: str | None = None,
        labels: Mapping[str, str] | None = None,
        reason: str = "cancelled by user",
    ) -> builtins.list[Job]:
        """Every unfinished job of ``queue`` and/or with all ``labels``."""
        return self.call(calls.cancel_matching(queue, labels or {}, reason)).cancelled

    def reprioritize(self, job: str, priority: int, reason: str = "") -> Job:
        """A waiting job's new priority (admin on its queue)."""
        return self.call(calls.reprioritize(self.job_id(job), priority, reason))

    def hold(self, job: str, reason: str = "") -> Job:
        """Keep a queued job from starting until ``release`` (``held``); 409 otherwise."""
        return self.call(calls.hold(self.job_id(job), reason))

    def requeue(self, job: str, reason: str = "") -> Job:
        """Stop a leased, pending or running job's run and queue the job for a new one
        (``preempted`` until the run is gone); a waiting job is unchanged; 409 for one that
        ended."""
        return self.call(calls.requeue(self.job_id(job), reason))

    def release(self, job: str, reason: str = "") -> Job:
        """A held job back to ``queued``, for the scheduler to start it."""
        return self.call(calls.release(self.job_id(job), reason))

    def engine_ids(self, job: str) -> EngineIds:
        """The engine's own ids of the job's latest run's replicas (Ray submission ids, the
        Slurm job id, the Kubernetes Job name, a local process group)."""
        return self.call(calls.engine_ids(self.job_id(job)))

    def why(self, job: str) -> Why:
        return self.call(calls.why(self.job_id(job)))

    def wait(self, job: str, timeout: float | None = None) -> JobDetail:
        """The job once it has ended (succeeded, failed or cancelled)."""
        return self.wait_all([job], timeout)[0]

    def wait_all(
        self, jobs: Sequence[str], timeout: float | None = None
    ) -> builtins.list[JobDetail]:
        """The jobs once all have ended; ``WaitTimeout`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waiting = Waiting()
        while pending := waiting.pending(jobs):
            for job in pending:
                waiting.take(job, self.get(job))
            if not waiting.pending(jobs):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(waiting.timeout_message(jobs, timeout or 0), waiting.states)
            time.sleep(POLL)
        return [waiting.details[job] for job in jobs]

    def events(self, job: str, *, follow: bool = False) -> Iterator[Event]:
        """The job's history, oldest first; ``follow``: then each new event, until it ends."""
        job_id = self.job_id(job)
        if not follow:
            yield from self.call(calls.events(job_id))
            return
        parser = calls.EventStreamParser()
        path = f"{calls.job_path(job_id)}/events/stream"
        with self.http.stream("GET", path, timeout=None) as response:
            if response.status_code >= 400:
                response.read()
                calls.check(response.status_code, response.reason_phrase, response.content)
            for line in response.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event
                if parser.ended:
                    return

    def logs(
        self,
        job: str,
        *,
        follow: bool = False,
        streams: Iterable[str] = calls.STREAMS,
        selection: LogSelection | None = None,
    ) -> Iterator[LogOutput]:
        """A run's output (both streams by default), as it is read. ``follow``: wait for a
        queued job to start, then keep reading until its run ends."""
        detail = self.get(job)
        if follow:
            while detail.run is None and detail.state not in calls.TERMINAL:
                time.sleep(POLL)
                detail = self.get(detail.id)
            if detail.run is None:
                return
        reader = LogReader(detail.id, streams, selection or LogSelection(), follow)
        while not reader.finished:
            for stream, call in reader.calls():
                output = reader.take(stream, self.call(call))
                if output is not None:
                    yield output
            if reader.pause and not reader.finished:
                time.sleep(POLL)

    # Queues, quotas, clusters ----------------------------------------------------------------
    def queues(self) -> builtins.list[QueueSpec]:
        return self.call(calls.queues())

    def put_queue(self, spec: QueueSpec) -> QueueSpec:
        """Create or replace a queue (admin)."""
        return self.call(calls.put_queue(spec))

    def delete_queue(self, name: str) -> None:
        """Delete a queue that has no jobs (admin)."""
        self.call(calls.delete_queue(name))

    def quotas(self) -> builtins.list[QuotaSpec]:
        """The roots of the quota forest, each with its subtree."""
        return self.call(calls.quotas())

    def put_quota(self, spec: QuotaSpec, parent: str | None = None) -> QuotaSpec:
        """Create or replace a quota and its subtree (admin), under ``parent`` if given."""
        return self.call(calls.put_quota(spec, parent))

    def delete_quota(self, name: str) -> None:
        self.call(calls.delete_quota(name))

    def clusters(self) -> builtins.list[Cluster]:
        return self.call(calls.clusters())

    def nodes(self, cluster: str) -> builtins.list[Node]:
        return self.call(calls.nodes(cluster))

    def report(self) -> Report:
        """The scheduler's last cycle and the job counts per queue and state."""
        return self.call(calls.report())

    def fleet_usage(self) -> dict[str, Any]:
        """What the fleet uses now, per cluster, node, queue and quota (with borrowing and
        lending): the dashboard's ``/ui/api/fleet``."""
        return self.call(calls.fleet_usage())

    def usage(
        self, since: str = "7d", until: str | None = None, by: str = "queue"
    ) -> dict[str, Any]:
        """Accounting (``sacct``/``sreport``): CPU-, memory- and GPU-hours per queue, owner or
        job over a range; ``since``/``until`` are durations ago (``7d``) or ISO 8601 times."""
        return self.call(calls.usage(since, until, by))

    def runs(
        self,
        since: str = "1d",
        queues: Sequence[str] = (),
        owner: str | None = None,
        states: Sequence[str] = (),
        limit: int | None = None,
    ) -> RunUseReport:
        """The per-run report (``flotilla sacct``): each run of the readable jobs active at
        or after ``since`` (a duration ago, ``1d``, or an ISO 8601 time), oldest first, with
        its state, exit code, nodes, elapsed, CPU seconds, peak memory and GPU use (null
        where not measured). Filters: queues, owner, run states."""
        return self.call(calls.runs(since, queues, owner, states, limit))

    def fleet(self) -> dict[str, Any]:
        """The fleet in force (admin): ``{"fleet": document, "version", "applied_at"}``;
        secrets appear as their references."""
        return self.call(calls.fleet())

    def export_scenario(self, runtimes: str = "auto") -> dict[str, Any]:
        """The live fleet and its workload as a scenario (admin): running jobs where they
        run, waiting ones in submission order, each with its runtime estimate and source."""
        return self.call(calls.export_scenario(runtimes))

    def apply_fleet(
        self, document: Mapping[str, Any], expected_version: int | None = None
    ) -> dict[str, Any]:
        """Apply a fleet document all or nothing (admin); only if the fleet in force is
        still ``expected_version`` when given."""
        return self.call(calls.apply_fleet(document, expected_version))
