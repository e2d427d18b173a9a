"""The client commands against the real API app (ASGI, no socket) over a SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from flotilla.cli import client as cli_client
from flotilla.cli.main import app
from flotilla.model import ClusterSpec, JobSpec
from flotilla.server import AuthSettings, create_app
from flotilla.server.auth import token_hash
from flotilla.store import JobState, SqlStore
from tests.builders import cluster, nodes, task
from tests.server.api_support import FakeScheduler, spec


def job_spec(name: str, queue: str = "team-a") -> JobSpec:
    """A job put straight into the store, as another client would."""
    return JobSpec.model_validate(spec(name, queue))


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def write(tmp_path: Path, data: object, name: str = "jobs.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_submit_a_list_then_list_and_describe(
    tmp_path: Path, servers: list[str], store: SqlStore
) -> None:
    path = write(tmp_path, [spec("prep"), spec("train", labels={"kind": "gpu"})])
    result = run("submit", str(path))
    assert result.exit_code == 0, result.output
    assert "submitted 2 jobs" in result.output
    ids = [job.id for job in store.list_jobs().jobs]
    assert all(job_id in result.output for job_id in ids)
    assert servers == ["http://127.0.0.1:8467"]

    listed = run("jobs", "--label", "kind=gpu")
    assert listed.exit_code == 0
    assert ids[1][:8] in listed.output and ids[0][:8] not in listed.output

    store.record_run(ids[0], "east", {})
    described = run("describe", ids[0])
    assert described.exit_code == 0, described.output
    for text in ("prep", "team-a", "leased", "echo prep", "east", "submitted"):
        assert text in described.output


def test_server_comes_from_the_environment_or_the_option(
    tmp_path: Path, servers: list[str]
) -> None:
    assert run("jobs", env={"FLOTILLA_SERVER": "http://env:1"}).exit_code == 0
    assert run("jobs", "--server", "http://flag:2").exit_code == 0
    assert servers == ["http://env:1", "http://flag:2"]


def test_a_bad_job_file_is_exit_2_naming_the_field(tmp_path: Path, servers: list[str]) -> None:
    bad = write(tmp_path, [spec("a"), spec("b", tasks=[{"name": "m", "resources": {"cpu": -1}}])])
    result = run("submit", str(bad))
    assert result.exit_code == 2
    assert "jobs[1].tasks[0].resources.cpu: must be >= 0" in result.output
    assert servers == []
    broken = tmp_path / "broken.yaml"
    broken.write_text("jobs: [")
    assert run("submit", str(broken)).exit_code == 2
    assert run("submit", str(tmp_path / "missing.yaml")).exit_code == 2


def test_api_errors_show_the_message_and_exit_1(
    tmp_path: Path, servers: list[str], store: SqlStore
) -> None:
    path = write(tmp_path, spec("train", queue="nope"))
    result = run("submit", str(path))
    assert result.exit_code == 1
    assert "unknown queue" in result.output and "queue: no such queue 'nope'" in result.output
    missing = run("describe", "no-such-job")
    assert missing.exit_code == 1 and "no such job: 'no-such-job'" in missing.output


def test_cancel_by_id_and_by_queue(tmp_path: Path, servers: list[str], store: SqlStore) -> None:
    a, b, c = store.submit_jobs(
        [
            job_spec("a"),
            job_spec("b"),
            job_spec("c", queue="team-b"),
        ]
    )
    store.record_run(b, "east", {})
    result = run("cancel", a, b)
    assert result.exit_code == 0, result.output
    assert f"{a} a: cancelled" in result.output and f"{b} b: cancel requested" in result.output
    by_queue = run("cancel", "--queue", "team-b")
    assert by_queue.exit_code == 0 and f"{c} c: cancelled" in by_queue.output
    assert store.get_job(c).state is JobState.CANCELLED
    assert run("cancel").exit_code == 2
    assert run("cancel", a, "--queue", "team-a").exit_code == 2


def test_a_cancelled_job_reads_cancelling_until_its_run_has_ended(
    tmp_path: Path, servers: list[str], store: SqlStore
) -> None:
    [job] = store.submit_jobs([job_spec("train")])
    run_id = store.record_run(job, "east", {}).id
    store.transition(job, JobState.PENDING, "dispatched", run=run_id)
    store.transition(job, JobState.RUNNING, "started", run=run_id)
    store.cancel(job, "not needed")
    assert "running (cancelling)" in run("describe", job).output
    store.transition(job, JobState.CANCELLED, "the run ended", run=run_id)
    for shown in (run("describe", job).output, run("jobs", "--all").output):
        assert "cancelled" in shown and "(cancelling)" not in shown


def test_logs_print_and_follow_until_the_run_ends(
    servers: list[str], store: SqlStore, scheduler: FakeScheduler
) -> None:
    (job_id,) = store.submit_jobs([job_spec("train")])
    run_record = store.record_run(job_id, "east", {})
    scheduler.logs_by_run[run_record.id] = b"epoch 1\nepoch 2\n"
    scheduler.finished_runs.add(run_record.id)
    result = run("logs", job_id, "-f", "--stdout")
    assert result.exit_code == 0 and result.output == "epoch 1\nepoch 2\n"
    assert scheduler.log_requests[-1].offset == 0
    not_yet = run("logs", store.submit_jobs([job_spec("waiting")])[0])
    assert not_yet.exit_code == 1 and "has no run yet" in not_yet.output


def test_watch_draws_a_bounded_number_of_refreshes(servers: list[str], store: SqlStore) -> None:
    (job_id,) = store.submit_jobs([job_spec("train")])
    result = run("watch", "--iterations", "1", "--queue", "team-a")
    assert result.exit_code == 0, result.output
    assert job_id[:8] in result.output and "1 job(s)" in result.output


def test_queues_quotas_clusters_and_why(servers: list[str], store: SqlStore) -> None:
    store.upsert_cluster(
        ClusterSpec.model_validate(
            {"name": "east", "nodes": [{"name": "n", "count": 2, "resources": {"cpu": 8}}]}
        )
    )
    (job_id,) = store.submit_jobs([job_spec("train")])
    queues = run("queues")
    assert queues.exit_code == 0 and "team-a" in queues.output and "vision" in queues.output
    quotas = run("quotas")
    assert quotas.exit_code == 0 and "org" in quotas.output and "vision" in quotas.output
    clusters = run("clusters", "--nodes")
    assert clusters.exit_code == 0 and "east" in clusters.output and "n-1" in clusters.output
    store.set_cluster_state("east", "unreachable", reason="settings.token: GONE is not set")
    clusters = run("clusters")
    assert "east: unreachable: settings.token: GONE is not set" in clusters.output
    why = run("why", job_id)
    assert why.exit_code == 0 and "1 of 1 queued in team-a" in why.output
    assert "quota vision" in why.output


def test_the_token_comes_from_flotilla_token(
    tmp_path: Path, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = AuthSettings.from_data(
        {"users": [{"name": "ana", "token_sha256": token_hash("s3cret"), "admin": True}]}
    )
    application = create_app(store, None, auth)
    monkeypatch.setattr(
        cli_client,
        "client_factory",
        lambda server, token: TestClient(
            application,
            base_url=server,
            headers={"Authorization": f"Bearer {token}"} if token else {},
        ),
    )
    refused = run("jobs")
    assert refused.exit_code == 1 and "a bearer token is required" in refused.output
    assert run("jobs", env={"FLOTILLA_TOKEN": "s3cret"}).exit_code == 0


def test_unreachable_server_is_exit_1_naming_it() -> None:
    result = run("jobs", "--server", "http://127.0.0.1:9")
    assert result.exit_code == 1
    assert "cannot reach the Flotilla server at http://127.0.0.1:9" in result.output


def test_serve_refuses_an_open_address_without_tokens(tmp_path: Path) -> None:
    result = run("serve", "--db", f"sqlite:///{tmp_path}/x.db", "--host", "0.0.0.0")
    assert result.exit_code == 2 and "refusing to listen on 0.0.0.0" in result.output
    bad = tmp_path / "auth.yaml"
    bad.write_text(json.dumps({"users": [{"name": "a"}]}))
    invalid = run("serve", "--auth", str(bad))
    assert invalid.exit_code == 2
    assert "users[0]: give exactly one of token_sha256 and token_env" in invalid.output


def test_submit_quiet_prints_only_the_ids(
    tmp_path: Path, servers: list[str], store: SqlStore
) -> None:
    result = run("submit", str(write(tmp_path, [spec("a"), spec("b")])), "--quiet")
    assert result.exit_code == 0, result.output
    assert result.output.split() == [job.id for job in store.list_jobs().jobs]


def test_wait_exits_0_when_every_job_succeeded(servers: list[str], store: SqlStore) -> None:
    store.upsert_cluster(
        ClusterSpec.model_validate({"name": "c", "nodes": [{"name": "n", "resources": {"cpu": 8}}]})
    )
    (job,) = store.submit_jobs([job_spec("done")])
    store.record_run(job, "c", {"placements": []})
    store.transition(job, JobState.RUNNING, "started")
    store.transition(job, JobState.SUCCEEDED, "exited 0")
    result = run("wait", job)
    assert result.exit_code == 0, result.output
    assert f"{job} succeeded" in result.output


def test_wait_exits_1_when_a_job_did_not_succeed(servers: list[str], store: SqlStore) -> None:
    (job,) = store.submit_jobs([job_spec("dropped")])
    store.cancel(job, "not needed")
    result = run("wait", job)
    assert result.exit_code == 1
    assert f"{job} cancelled" in result.output


def test_wait_gives_up_with_exit_3_naming_the_job_still_waiting(
    servers: list[str], store: SqlStore
) -> None:
    (job,) = store.submit_jobs([job_spec("stuck")])
    result = run("wait", job, "--timeout", "0")
    assert result.exit_code == 3
    assert job in result.output and "queued" in result.output


def test_ui_prints_the_dashboard_address_with_the_token_in_its_fragment() -> None:
    from typer.testing import CliRunner

    from flotilla.cli.main import app

    with_token = CliRunner().invoke(
        app, ["ui", "--server", "http://127.0.0.1:9"], env={"FLOTILLA_TOKEN": "a b/c"}
    )
    assert with_token.stdout.strip() == "http://127.0.0.1:9/ui#token=a%20b%2Fc"
    without = CliRunner().invoke(
        app, ["ui", "--server", "http://10.0.0.1:9/"], env={"FLOTILLA_TOKEN": ""}
    )
    assert without.stdout.strip() == "http://10.0.0.1:9/ui"  # no local token for a remote one


def test_a_chain_from_one_file_and_why_names_the_dependency(
    tmp_path: Path, servers: list[str], store: SqlStore
) -> None:
    chain = [spec("prep"), spec("train", depends_on=[{"job": "prep", "condition": "finished"}])]
    result = run("submit", str(write(tmp_path, chain)), "-q")
    assert result.exit_code == 0, result.output
    prep, train = result.output.split()
    why = run("why", train)
    assert why.exit_code == 0, why.output
    assert f"waits for job team-a/prep ({prep[:8]}) to finish (it is queued)" in why.output
    assert f"depends on prep ({prep[:8]}): needs finished, is queued" in why.output
    described = run("describe", train)
    assert described.exit_code == 0, described.output
    assert f"prep ({prep[:8]}) finished" in described.output


def test_a_cycle_in_the_file_is_refused_naming_the_jobs(
    tmp_path: Path, servers: list[str], store: SqlStore
) -> None:
    chain = [spec("a", depends_on=[{"job": "b"}]), spec("b", depends_on=[{"job": "a"}])]
    result = run("submit", str(write(tmp_path, chain)))
    assert result.exit_code == 1
    assert "jobs[0].depends_on: dependency cycle a → b → a" in result.output
    assert store.list_jobs().jobs == []


def test_hold_if_unfit_keeps_a_job_the_fleet_cannot_hold(
    tmp_path: Path, servers: list[str], store: SqlStore
) -> None:
    store.upsert_cluster(ClusterSpec.model_validate(cluster("small", nodes(2, cpu=8))))
    path = write(tmp_path, spec("big", tasks=[task(cpu=16)]))
    refused = run("submit", str(path))
    assert refused.exit_code == 1
    assert "tasks[0].resources.cpu: 16 per replica, but the largest node" in refused.output
    held = run("submit", str(path), "--hold-if-unfit", "-q")
    assert held.exit_code == 0, held.output
    assert store.get_job(held.output.strip()).state is JobState.QUEUED


def test_jobs_start_shows_each_waiting_jobs_start_or_why_not_as_squeue_start(
    servers: list[str], store: SqlStore
) -> None:
    """``flotilla jobs --start`` (``squeue --start``): a START column with the expected start,
    or N/A and why: a held job, and here no projection runs beside the server at all."""
    held, waiting = store.submit_jobs(
        [JobSpec.model_validate(spec("held")), JobSpec.model_validate(spec("waiting"))]
    )
    store.hold_many([held], "wait for the data")
    listed = run("jobs", "--start", env={"COLUMNS": "250"})
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[1]: line for line in listed.output.splitlines() if line.split()[1:2]}
    assert "START" in listed.output
    assert "N/A (held, it starts only once released" in rows["held"], listed.output
    assert "N/A (no projection runs beside this server" in rows["waiting"], listed.output
    plain = run("jobs", env={"COLUMNS": "250"})
    assert "START" not in plain.output and "N/A" not in plain.output
    assert waiting
