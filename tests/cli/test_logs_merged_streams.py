"""``flotilla logs`` of a run on an engine that keeps one log per process and returns it for both
streams (Kubernetes' container log): the command prints it once. (Ray's backend serves its
merged log as stdout alone: tests/backends/test_ray.py.)"""

from __future__ import annotations

import pytest

from flotilla.model import ClusterSpec
from flotilla.store import SqlStore
from tests.server.api_support import FakeScheduler

from .test_client_commands import job_spec, run


@pytest.mark.parametrize(("backend", "times"), [("kubernetes", 1), ("local", 2)])
def test_logs_print_a_merged_log_once(
    servers: list[str], store: SqlStore, scheduler: FakeScheduler, backend: str, times: int
) -> None:
    store.upsert_cluster(
        ClusterSpec.model_validate(
            {"name": "k8s", "backend": backend, "nodes": [{"name": "n", "resources": {"cpu": 8}}]}
        )
    )
    (job_id,) = store.submit_jobs([job_spec("train")])
    run_record = store.record_run(job_id, "k8s", {})
    # What such a backend answers: the same merged bytes on stdout and on stderr.
    scheduler.logs_by_run[run_record.id] = b"epoch 1\nepoch 2\n"
    scheduler.finished_runs.add(run_record.id)
    for args in (("logs", job_id), ("logs", job_id, "-f")):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert result.output == "epoch 1\nepoch 2\n" * times
    stderr_only = run("logs", job_id, "--stderr")  # asked for: still read
    assert stderr_only.exit_code == 0 and "epoch 1" in stderr_only.output
