"""``flotilla clusters --nodes``: every node with what is allocated of it, its GPUs in use and
its jobs (``sinfo``'s view; it showed the resources only, not even the GPUs)."""

from __future__ import annotations

from typer.testing import CliRunner

from flotilla.cli.main import app
from flotilla.model import ClusterSpec, JobSpec
from flotilla.store import RunRequest, SqlStore


def test_the_node_view_shows_allocation_gpus_in_use_and_jobs(
    servers: list[str], store: SqlStore
) -> None:
    store.upsert_cluster(
        ClusterSpec.model_validate(
            {
                "name": "gpus",
                "nodes": [
                    {
                        "name": "g",
                        "count": 2,
                        "resources": {"cpu": 16, "memory": "64Gi"},
                        "gpus": {"count": 4},
                    }
                ],
            }
        )
    )
    task = {"name": "main", "resources": {"cpu": 4, "gpu": 2}}
    (job,) = store.submit_jobs(
        [JobSpec.model_validate({"name": "train", "queue": "team-a", "tasks": [task]})]
    )
    placement = {
        "task": "main",
        "replica": 0,
        "node": "g-0",
        "gpus": [0, 1],
        "shares": [[0, 1.0], [1, 1.0]],
    }
    store.record_runs([RunRequest(job, "gpus", {"cluster": "gpus", "placements": [placement]})])
    result = CliRunner().invoke(app, ["clusters", "--nodes"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    rows = {line.split()[0]: line for line in lines if line.startswith("g-")}
    assert "cpu 4/16" in rows["g-0"] and "  2/4  " in rows["g-0"]  # GPUs in use / devices
    assert "cpu 0/16" in rows["g-1"] and "  0/4  " in rows["g-1"]
    assert rows["g-0"].split()[-1] == "1" and rows["g-1"].split()[-1] == "0"
