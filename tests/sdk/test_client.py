"""flotilla.Client and flotilla.AsyncClient against a real service in the test process (the
API app over the real scheduling loop and local backend, SQLite): typed results, pages,
names, following logs and events, waiting, and typed errors carrying the API's message."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

import flotilla
from flotilla.sdk import JobDetail, JobFilter, LogSelection
from tests.live_service import LiveService, live_service
from tests.timing import limit


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveService]:
    with live_service(tmp_path) as service:
        yield service


@pytest.fixture
def client(live: LiveService) -> Iterator[flotilla.Client]:
    with flotilla.Client("http://testserver", http=TestClient(live.app)) as sdk:
        yield sdk


def test_submit_wait_and_read_both_streams_typed(
    live: LiveService, client: flotilla.Client
) -> None:
    submitted = client.submit(live.spec("hello", "echo out; echo err >&2; exit 0"))
    assert [job.name for job in submitted.jobs] == ["hello"]
    done = client.wait("hello", timeout=limit(60))
    assert isinstance(done, JobDetail) and done.id == submitted.ids[0]
    assert (done.state, done.runs[-1].exit_code) == ("succeeded", 0)
    read = [(output.stream, output.text) for output in client.logs("default/hello")]
    assert sorted(read) == [("stderr", "err\n"), ("stdout", "out\n")]
    only = client.logs(done.id[:9], streams=("stdout",), selection=LogSelection(attempt=1))
    assert [output.text for output in only] == ["out\n"]
    kinds = [event.kind for event in client.events("hello", follow=True)]
    assert kinds[0] == "submitted" and len(kinds) >= 4


def test_list_iterates_every_page_newest_first(live: LiveService, client: flotilla.Client) -> None:
    specs = [
        live.spec(f"j{index}", "true", cpu=live.cpus * 4, hold_if_unfit=True) for index in range(5)
    ]
    ids = client.submit(specs).ids
    listed = [job.id for job in client.list(JobFilter(newest_first=True), page_size=2)]
    assert listed == ids[::-1]
    assert [job.id for job in client.list(page_size=2, limit=3)] == ids[:3]
    assert client.page(JobFilter(name="j3"), total=True).total == 1
    client.cancel_matching(queue="default")


def test_errors_are_typed_and_carry_the_servers_message(
    live: LiveService, client: flotilla.Client
) -> None:
    with pytest.raises(flotilla.NotFound, match="no-such-job"):
        client.get("no-such-job")
    client.submit(live.spec("twin", "sleep 30", cpu=live.cpus * 4, hold_if_unfit=True))
    twins = [live.spec("pair", "true"), live.spec("pair", "true")]
    with pytest.raises(flotilla.Conflict, match="given twice") as taken:
        client.submit(twins)
    assert taken.value.status == 409
    with pytest.raises(flotilla.InvalidSpec) as invalid:
        client.submit({"name": "bad", "queue": "default", "tasks": []})
    assert invalid.value.problems and invalid.value.status == 0
    with pytest.raises(flotilla.WaitTimeout) as waited:
        client.wait("twin", timeout=0)
    assert waited.value.states == {"twin": "queued"}
    assert client.cancel("twin").state == "cancelled"
    with pytest.raises(flotilla.Unreachable, match=r"127\.0\.0\.1:9"):
        flotilla.Client("http://127.0.0.1:9", token="x").queues()


def test_the_async_client_does_the_same(live: LiveService) -> None:
    async def session() -> tuple[str, list[str], list[str], str]:
        transport = httpx.ASGITransport(app=live.app)
        http = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        async with flotilla.AsyncClient(http=http) as client:
            [job_id] = (await client.submit(live.spec("hello", "echo async"))).ids
            done = await client.wait(job_id, timeout=limit(60))
            texts = [output.text async for output in client.logs("hello", follow=True)]
            names = [job.name async for job in client.list(limit=5)]
            with pytest.raises(flotilla.NotFound):
                await client.why("nope")
            return done.state, texts, names, (await client.queues())[0].name

    with ThreadPoolExecutor(1) as thread:  # its own event loop, whatever this thread runs
        state, texts, names, queue = thread.submit(asyncio.run, session()).result()
    assert (state, texts, names, queue) == ("succeeded", ["async\n"], ["hello"], "default")


def test_a_dependency_chain_an_array_and_the_usage_report_through_the_sdk(
    live: LiveService, client: flotilla.Client
) -> None:
    prep = live.spec("prep", "true")
    train = live.spec("train", "sleep 0.5") | {"depends_on": [{"job": "prep"}]}
    sweep = live.spec("sweep", "echo $FLOTILLA_ARRAY_INDEX") | {"array": {"size": 3}}
    submitted = client.submit([prep, train, sweep])
    array_id = submitted.jobs[-1].array_id
    assert array_id is not None and [job.name for job in submitted.jobs][2:] == [
        "sweep-0",
        "sweep-1",
        "sweep-2",
    ]
    assert [dependency.job for dependency in client.get("train").dependencies] == ["prep"]
    ended = client.wait_all(["train", *(job.id for job in client.array(array_id).jobs)], 60)
    assert {job.state for job in ended} == {"succeeded"}
    assert client.array(array_id).counts == {"succeeded": 3}
    assert client.cancel_array(array_id) == []  # nothing unfinished left to cancel
    report = client.usage(since="1h", by="queue")
    [row] = report["rows"]
    assert (row["queue"], row["jobs"]) == ("default", 5) and row["cpu_hours"] > 0


def test_the_run_report_through_the_sdk(live: LiveService, client: flotilla.Client) -> None:
    """``Client.runs`` (``flotilla sacct``): each run with its end, node and, once the loop
    recorded it, what it used where this machine measures it (cgroups as root)."""
    [job_id] = client.submit(live.spec("sums", "exit 4")).ids
    assert client.wait(job_id, timeout=limit(60)).state == "failed"
    report = client.runs(since="1h", queues=["default"], states=["failed"])
    [run] = report.runs
    assert (run.job, run.name, run.exit_code, run.attempt) == (job_id, "sums", 4, 1)
    assert run.nodes and run.elapsed_seconds is not None
    assert client.runs(since="1h", states=["succeeded"]).runs == []
    with pytest.raises(flotilla.NotFound, match="nope"):
        client.runs(queues=["nope"])
