"""A job's ``preemption: {signal, grace}`` travels with its dispatch (issue 28): a backend whose
engine fixes how a run is stopped when it starts it (Ray) reads it from the request."""

from __future__ import annotations

from pathlib import Path

from flotilla.backends.interface import DispatchRequest, DispatchResult
from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec
from flotilla.store import SqlStore
from tests.service_builders import loop_over
from tests.timing import wait_until


class RecordingSim(SimBackend):
    """A sim backend that keeps each dispatch request it was handed."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.requests: dict[str, DispatchRequest] = {}

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        self.requests[request.job] = request
        return super().dispatch(request)


def job(name: str, **fields: object) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 600}},
            **fields,
        }
    )


def test_the_jobs_preemption_signal_and_grace_reach_the_backend(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    backend = RecordingSim(cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 8}}])
    loop = loop_over(store, {"sim": backend}, replica="preemption-dispatch")
    try:
        asking, plain = store.submit_jobs(
            [job("asking", preemption={"signal": "SIGUSR1", "grace": 120}), job("plain")]
        )
        wait_until(
            lambda: len(backend.requests) >= 2,
            "the jobs to be dispatched",
            60,
            interval=0.0,
            step=loop.cycle,
        )
        asked = backend.requests[asking]
        assert (asked.preemption_signal, asked.preemption_grace) == ("SIGUSR1", 120)
        unasked = backend.requests[plain]
        assert (unasked.preemption_signal, unasked.preemption_grace) == (None, None)
    finally:
        loop.close()
        backend.close()
        store.close()
