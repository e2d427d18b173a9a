"""``flotilla.AsyncClient``: ``flotilla.Client``'s methods as coroutines (and async iterators
for ``list``, ``events`` and ``logs``), for asyncio programs."""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
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


class AsyncClient:
    """See ``flotilla.Client``; ``http`` is an ``httpx.AsyncClient``. Use ``async with``, or
    await ``close``."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.server = server_address(server)
        self.http = http or httpx.AsyncClient(**http_settings(self.server, token, timeout))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def call(self, call: Call[T]) -> T:
        try:
            response = await self.http.request(
                call.method, call.path, params=call.params, json=call.body
            )
        except httpx.TransportError as error:
            raise Unreachable(
                f"cannot reach the Flotilla server at {self.server}: {error}"
            ) from None
        return calls.answer(call, response.status_code, response.reason_phrase, response.content)

    # Jobs -----------------------------------------------------------------------------------
    async def submit(self, jobs: Submission) -> SubmitResult:
        from flotilla.sdk import jobfile

        return await self.call(calls.submit(jobfile.submission_body(jobs)))

    async def get(self, job: str) -> JobDetail:
        return await self.call(calls.get_job(job))

    async def job_id(self, job: str) -> str:
        return (await self.get(job)).id if "/" in job else job

    async def list(
        self, where: JobFilter | None = None, *, page_size: int = 100, limit: int | None = None
    ) -> AsyncIterator[Job]:
        after: int | None = None
        given = 0
        while limit is None or given < limit:
            size = page_size if limit is None else min(page_size, limit - given)
            page = await self.page(where, after=after, limit=size)
            for job in page.jobs:
                given += 1
                yield job
            after = page.next_cursor
            if after is None:
                return

    async def page(
        self,
        where: JobFilter | None = None,
        *,
        after: int | None = None,
        limit: int = 100,
        total: bool = False,
        starts: bool = False,
    ) -> JobList:
        return await self.call(calls.list_page(where or JobFilter(), after, limit, total, starts))

    async def cancel(self, job: str, reason: str = "cancelled by user") -> Job:
        return await self.call(calls.cancel(await self.job_id(job), reason))

    async def array(self, array_id: str) -> ArrayDetail:
        """A job array as one: its elements and their counts by state."""
        return await self.call(calls.array(array_id))

    async def cancel_array(
        self, array_id: str, reason: str = "cancelled by user"
    ) -> builtins.list[Job]:
        """Every unfinished element of the array (running ones are asked to stop)."""
        return (await self.call(calls.cancel_array(array_id, reason))).cancelled

    async def cancel_matching(
        self,
        *,
        queue: str | None = None,
        labels: Mapping[str, str] | None = None,
        reason: str = "cancelled by user",
    ) -> builtins.list[Job]:
        found = await self.call(calls.cancel_matching(queue, labels or {}, reason))
        return found.cancelled

    async def reprioritize(self, job: str, priority: int, reason: str = "") -> Job:
        return await self.call(calls.reprioritize(await self.job_id(job), priority, reason))

    async def hold(self, job: str, reason: str = "") -> Job:
        return await self.call(calls.hold(await self.job_id(job), reason))

    async def engine_ids(self, job: str) -> EngineIds:
        return await self.call(calls.engine_ids(await self.job_id(job)))

    async def requeue(self, job: str, reason: str = "") -> Job:
        return await self.call(calls.requeue(await self.job_id(job), reason))

    async def release(self, job: str, reason: str = "") -> Job:
        return await self.call(calls.release(await self.job_id(job), reason))

    async def why(self, job: str) -> Why:
        return await self.call(calls.why(await self.job_id(job)))

    async def wait(self, job: str, timeout: float | None = None) -> JobDetail:
        return (await self.wait_all([job], timeout))[0]

    async def wait_all(
        self, jobs: Sequence[str], timeout: float | None = None
    ) -> builtins.list[JobDetail]:
        deadline = None if timeout is None else time.monotonic() + timeout
        waiting = Waiting()
        while pending := waiting.pending(jobs):
            for job in pending:
                waiting.take(job, await self.get(job))
            if not waiting.pending(jobs):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(waiting.timeout_message(jobs, timeout or 0), waiting.states)
            await asyncio.sleep(POLL)
        return [waiting.details[job] for job in jobs]

    async def events(self, job: str, *, follow: bool = False) -> AsyncIterator[Event]:
        job_id = await self.job_id(job)
        if not follow:
            for past in await self.call(calls.events(job_id)):
                yield past
            return
        parser = calls.EventStreamParser()
        path = f"{calls.job_path(job_id)}/events/stream"
        async with self.http.stream("GET", path, timeout=None) as response:
            if response.status_code >= 400:
                await response.aread()
                calls.check(response.status_code, response.reason_phrase, response.content)
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event
                if parser.ended:
                    return

    async def logs(
        self,
        job: str,
        *,
        follow: bool = False,
        streams: Iterable[str] = calls.STREAMS,
        selection: LogSelection | None = None,
    ) -> AsyncIterator[LogOutput]:
        detail = await self.get(job)
        if follow:
            while detail.run is None and detail.state not in calls.TERMINAL:
                await asyncio.sleep(POLL)
                detail = await self.get(detail.id)
            if detail.run is None:
                return
        reader = LogReader(detail.id, streams, selection or LogSelection(), follow)
        while not reader.finished:
            for stream, call in reader.calls():
                output = reader.take(stream, await self.call(call))
                if output is not None:
                    yield output
            if reader.pause and not reader.finished:
                await asyncio.sleep(POLL)

    # Queues, quotas, clusters ----------------------------------------------------------------
    async def queues(self) -> builtins.list[QueueSpec]:
        return await self.call(calls.queues())

    async def put_queue(self, spec: QueueSpec) -> QueueSpec:
        return await self.call(calls.put_queue(spec))

    async def delete_queue(self, name: str) -> None:
        await self.call(calls.delete_queue(name))

    async def quotas(self) -> builtins.list[QuotaSpec]:
        return await self.call(calls.quotas())

    async def put_quota(self, spec: QuotaSpec, parent: str | None = None) -> QuotaSpec:
        return await self.call(calls.put_quota(spec, parent))

    async def delete_quota(self, name: str) -> None:
        await self.call(calls.delete_quota(name))

    async def clusters(self) -> builtins.list[Cluster]:
        return await self.call(calls.clusters())

    async def nodes(self, cluster: str) -> builtins.list[Node]:
        return await self.call(calls.nodes(cluster))

    async def report(self) -> Report:
        return await self.call(calls.report())

    async def fleet_usage(self) -> dict[str, Any]:
        return await self.call(calls.fleet_usage())

    async def usage(
        self, since: str = "7d", until: str | None = None, by: str = "queue"
    ) -> dict[str, Any]:
        return await self.call(calls.usage(since, until, by))

    async def runs(
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
        return await self.call(calls.runs(since, queues, owner, states, limit))

    async def fleet(self) -> dict[str, Any]:
        """The fleet in force (admin): ``{"fleet": document, "version", "applied_at"}``;
        secrets appear as their references."""
        return await self.call(calls.fleet())

    async def export_scenario(self, runtimes: str = "auto") -> dict[str, Any]:
        """The live fleet and its workload as a scenario (admin)."""
        return await self.call(calls.export_scenario(runtimes))

    async def apply_fleet(
        self, document: Mapping[str, Any], expected_version: int | None = None
    ) -> dict[str, Any]:
        """Apply a fleet document all or nothing (admin); only if the fleet in force is
        still ``expected_version`` when given."""
        return await self.call(calls.apply_fleet(document, expected_version))
