"""Where the user is, and Slurm habits, on the command line (issue 37): ``run`` and ``submit``
send the submit directory and the submitter's environment (``--export``, Slurm's, minus what
is not the job's) when the server is on this machine; ``--dependency``, ``-o``/``--error``,
``--signal`` and ``--requeue`` as sbatch's; ``#SBATCH`` lines translated, each one ignored
named in a warning; the format flag is ``--format``, never ``-o``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from flotilla.cli.main import app
from flotilla.cli.where import Export, exported_env, parse_export, server_is_here
from flotilla.store import SqlStore

ELSEWHERE = "http://flotilla.example.org:8467"


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin, env=env)


def test_export_all_leaves_out_credentials_flotillas_own_and_the_session() -> None:
    environ = {
        "PATH": "/home/ana/venv/bin:/usr/bin",
        "EPOCHS": "3",
        "CUDA_HOME": "/opt/cuda",
        "FLOTILLA_TOKEN": "t",
        "FLOTILLA_SERVER": "s",
        "AWS_SECRET_ACCESS_KEY": "x",
        "GITHUB_TOKEN": "x",
        "PGPASSWORD": "x",
        "OPENAI_API_KEY": "x",
        "SSH_AUTH_SOCK": "/tmp/ssh",
        "HOME": "/home/ana",
        "PWD": "/home/ana/project",
        "LD_PRELOAD": "/x.so",
    }
    assert exported_env(parse_export("ALL"), environ) == {
        "PATH": "/home/ana/venv/bin:/usr/bin",
        "EPOCHS": "3",
        "CUDA_HOME": "/opt/cuda",
    }
    assert exported_env(parse_export("NONE"), environ) == {}
    named = parse_export("EPOCHS,GITHUB_TOKEN,LR=0.1")  # named: the user's word
    assert exported_env(named, environ) == {"EPOCHS": "3", "GITHUB_TOKEN": "x", "LR": "0.1"}
    with_all = parse_export("ALL,LR=0.1")
    assert with_all == Export(True, (), {"LR": "0.1"})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("FLOTILLA_TOKEN", "FLOTILLA_TOKEN is Flotilla's own"),
        ("EPOCHS,NONE", "ALL or NONE come alone"),
        ("1BAD", "is not VAR or VAR=value"),
    ],
)
def test_a_bad_export_is_exit_2_naming_it(
    servers: list[str], store: SqlStore, value: str, problem: str
) -> None:
    result = run("run", "-p", "team-a", "--export", value, "--", "true")
    assert result.exit_code == 2 and problem in result.output, result.output
    assert servers == []


def test_the_server_is_here_on_loopback_and_this_machines_name() -> None:
    import socket

    assert server_is_here("http://127.0.0.1:8467") and server_is_here("http://localhost:1")
    assert server_is_here(f"http://{socket.gethostname()}:8467")
    assert not server_is_here(ELSEWHERE)


def test_run_and_submit_here_send_the_directory_and_environment_elsewhere_neither(
    servers: list[str], store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"EPOCHS": "3", "MY_API_KEY": "k"}
    assert run("run", "-p", "team-a", "-J", "here", "-q", "--", "true", env=env).exit_code == 0
    away = ["--server", ELSEWHERE, "--export", "ALL,LR=1"]
    assert run("run", "-p", "team-a", "-J", "away", *away, "--", "true", env=env).exit_code == 0
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "name": "filed",
                "queue": "team-b",
                "tasks": [{"name": "main", "resources": {"cpu": 1}}],
                "payload": {"command": "true", "env": {"EPOCHS": "9"}},
            }
        )
    )
    simulated = tmp_path / "sim.yaml"
    simulated.write_text(
        yaml.safe_dump(
            {
                "name": "simulated",
                "queue": "team-b",
                "tasks": [{"name": "main", "resources": {"cpu": 1}}],
                "payload": {"sim": {"duration": 60}},
            }
        )
    )
    assert run("submit", str(job_file), env=env).exit_code == 0
    assert run("submit", str(simulated), env=env).exit_code == 0
    jobs = {job.name: dict(job.spec.payload or {}) for job in store.list_jobs().jobs}
    here = jobs["here"]
    assert here["working_dir"] == str(tmp_path) and here["env"]["EPOCHS"] == "3"
    assert "MY_API_KEY" not in here["env"]
    # Elsewhere, this directory and environment are not the job's machine's: only --export's
    # explicit values go.
    assert jobs["away"] == {"command": "true", "env": {"LR": "1"}}
    assert jobs["simulated"] == {"sim": {"duration": 60}}  # no process: nothing to place
    # A job file's own env wins over the exported one.
    assert jobs["filed"]["working_dir"] == str(tmp_path)
    assert jobs["filed"]["env"]["EPOCHS"] == "9"


def test_a_relative_chdir_is_under_the_submit_directory_as_sbatchs(
    servers: list[str], store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("run", "-p", "team-a", "-D", "sub", "--export", "NONE", "--", "true").exit_code == 0
    (job,) = store.list_jobs().jobs
    assert (job.spec.payload or {})["working_dir"] == str(tmp_path / "sub")


def test_dependencies_on_run_and_submit_by_id_and_by_the_newest_name(
    servers: list[str], store: SqlStore
) -> None:
    quiet = ["-p", "team-a", "-q", "--export", "NONE"]
    first = run("run", *quiet, "-J", "prep", "--", "true").output.split()[0]
    newest = run("run", *quiet, "-J", "prep", "--", "true").output.split()[0]
    assert first != newest, "a name submitted again gives another job, as sbatch does"
    result = run(
        "run", *quiet, "-J", "train", "-d", f"afterok:{first}:prep,afternotok:prep", "--", "true"
    )
    assert result.exit_code == 0, result.output
    train = store.find_job("train")
    assert [(d.job_id, d.condition.value) for d in train.dependencies] == [
        (first, "succeeded"),
        (newest, "succeeded"),
        (newest, "failed"),
    ]
    bad = run("run", *quiet, "-d", "after:1", "--", "true")
    assert bad.exit_code == 2 and "--dependency: 'after:1': give afterok:ID[:ID]" in bad.output


def test_output_error_signal_and_requeue_flags(servers: list[str], store: SqlStore) -> None:
    result = run(
        "run", "-p", "team-a", "-J", "x", "--export", "NONE", "-o", "out-%j.log",
        "--error", "err.log", "--signal", "USR1@60", "--requeue", "--", "python train.py",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (job,) = store.list_jobs().jobs
    spec = job.spec
    assert (spec.payload or {})["command"] == [
        "/bin/sh", "-c", 'exec >out-"$FLOTILLA_JOB".log 2>err.log; exec "$@"', "flotilla-job",
        "/bin/sh", "-c", "python train.py",
    ]  # fmt: skip
    assert spec.preemption is not None
    assert (spec.preemption.signal, spec.preemption.grace) == ("SIGUSR1", 60)
    assert spec.retry is not None and spec.retry.limit == 5
    assert [cause.value for cause in spec.retry.on] == ["lost", "node_failure"]


def test_sbatch_lines_are_translated_and_each_ignored_one_warned(
    servers: list[str], store: SqlStore, tmp_path: Path
) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --job-name=sweep --partition=team-a\n"
        "#SBATCH -t 1-02:30:00\n"
        "#SBATCH --ntasks=2 -c 3 --mem=2G\n"
        "#SBATCH --gres=gpu:a100:2\n"
        "#SBATCH -a 0-7%2\n"
        "#SBATCH --qos=high\n"
        "#SBATCH --mem-per-cpu=1G\n"
        "#FLOTILLA --cpu 4\n"
        "srun python train.py\n"
    )
    result = run("run", "--export", "NONE", str(script))
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warned == [
        f"warning: {script}:7: #SBATCH --qos=high ignored (Flotilla has no such setting)",
        f"warning: {script}:8: #SBATCH --mem-per-cpu=1G ignored (Flotilla has no such setting)",
    ]
    jobs = store.list_jobs().jobs
    assert len(jobs) == 8 and {job.name for job in jobs} == {f"sweep-{i}" for i in range(8)}
    spec = jobs[0].spec
    assert (spec.queue, spec.max_runtime) == ("team-a", ((24 + 2) * 60 + 30) * 60)
    task = spec.tasks[0]
    assert task.replicas == 2
    assert dict(task.resources) == {"cpu": 4, "memory": 2 * 2**30, "gpu": 2}  # #FLOTILLA wins
    assert spec.array is not None and (spec.array.size, spec.array.parallelism) == (8, 2)


def test_the_format_flag_is_format_and_o_is_not_it(servers: list[str], store: SqlStore) -> None:
    assert json.loads(run("jobs", "--format", "json").output)["jobs"] == []
    assert json.loads(run("jobs", "--output-format", "json").output)["jobs"] == []
    assert run("jobs", "-o", "json").exit_code == 2
