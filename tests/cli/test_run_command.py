"""``flotilla run [flags] -- COMMAND`` and ``flotilla submit -``: a job without a file, as
``sbatch --wrap``/``srun`` and ``ray job submit -- …`` users expect."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from typer.testing import CliRunner, Result

from flotilla.cli.main import app
from flotilla.store import SqlStore


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def test_flags_and_a_command_are_one_job(servers: list[str], store: SqlStore) -> None:
    result = run(
        "run", "--queue", "team-a", "--cpu", "2", "--memory", "4Gi", "--gpu", "1",
        "--time", "1:30:00", "-l", "team=vision", "-e", "EPOCHS=3",
        "--", "python", "train.py", "--epochs", "3",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (job,) = store.list_jobs().jobs
    assert job.id in result.output and job.name.startswith("python-")
    spec = job.spec
    assert (spec.queue, spec.max_runtime, dict(spec.labels)) == ("team-a", 5400, {"team": "vision"})
    assert dict(spec.tasks[0].resources) == {"cpu": 2, "memory": 4 * 2**30, "gpu": 1}
    payload = dict(spec.payload or {})
    assert payload["command"] == ["python", "train.py", "--epochs", "3"]  # its own flags
    # The server is on this machine: the job runs here, with this environment (sbatch's
    # --chdir and --export=ALL defaults), -e on top.
    assert payload["working_dir"] == os.getcwd() and payload["env"]["EPOCHS"] == "3"
    assert payload["env"]["PATH"] == os.environ["PATH"]


def test_one_word_is_a_shell_line_and_options_end_at_the_command(
    servers: list[str], store: SqlStore
) -> None:
    assert run("run", "-p", "team-a", "-J", "argv", "printf", "--cpu", "9").exit_code == 0
    assert run("run", "-p", "team-a", "-J", "piped", "echo hi | tr a-z A-Z").exit_code == 0
    jobs = {job.name: job.spec for job in store.list_jobs().jobs}
    assert (jobs["argv"].payload or {})["command"] == ["printf", "--cpu", "9"]  # its flag
    assert dict(jobs["argv"].tasks[0].resources) == {"cpu": 1}
    assert (jobs["piped"].payload or {})["command"] == "echo hi | tr a-z A-Z"  # by /bin/sh -c


def test_two_runs_of_one_program_get_different_names(servers: list[str], store: SqlStore) -> None:
    for _ in range(2):
        assert run("run", "-p", "team-a", "-q", "--", "sleep", "1").exit_code == 0
    names = {job.name for job in store.list_jobs().jobs}
    assert len(names) == 2 and all(name.startswith("sleep-") for name in names)


def test_an_array_flag_is_slurms_n_percent_k(servers: list[str], store: SqlStore) -> None:
    result = run("run", "-p", "team-a", "--array", "4%2", "-q", "--", "true")
    assert result.exit_code == 0, result.output
    jobs = store.list_jobs().jobs
    assert len(jobs) == 4 and len(result.output.split()) == 4
    array = jobs[0].spec.array
    assert array is not None and (array.size, array.parallelism) == (4, 2)


def test_bad_flags_are_exit_2_naming_them_and_send_nothing(
    servers: list[str], store: SqlStore
) -> None:
    for args, problem in [
        (["--time", "soon", "--", "true"], "--max-runtime: 'soon' is not a duration"),
        (["--array", "4%", "--", "true"], "--array: expected N or N%K"),
        (["-l", "novalue", "--", "true"], "--label: expected KEY=VALUE"),
        (["--memory", "lots", "--", "true"], "tasks[0].resources.memory"),
        ([], "give the command after the flags"),
    ]:
        result = run("run", "-p", "team-a", *args)
        assert result.exit_code == 2, (args, result.output)
        assert problem in result.output, (args, result.output)
    assert store.list_jobs().jobs == [] and servers == []


def test_dry_run_prints_the_job_file_it_would_submit(servers: list[str], store: SqlStore) -> None:
    result = run(
        "run", "-p", "team-a", "-J", "x", "--export", "NONE", "--dry-run", "--", "hostname"
    )
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(result.output)
    assert spec["name"] == "x"
    assert spec["payload"] == {"command": "hostname", "working_dir": os.getcwd()}
    assert store.list_jobs().jobs == [] and servers == []
    # The printed file is one `submit -` takes as it is.
    again = run("submit", "-", stdin=result.output)
    assert again.exit_code == 0, again.output
    assert [job.name for job in store.list_jobs().jobs] == ["x"]


def test_submit_dash_reads_the_job_file_from_standard_input(
    servers: list[str], store: SqlStore
) -> None:
    text = yaml.safe_dump(
        [
            {"name": f"from-stdin-{index}", "queue": "team-b",
             "tasks": [{"name": "main", "resources": {"cpu": 1}}],
             "payload": {"command": "true"}}
            for index in range(2)
        ]
    )  # fmt: skip
    result = run("submit", "-", stdin=text)
    assert result.exit_code == 0, result.output
    assert sorted(job.name for job in store.list_jobs().jobs) == ["from-stdin-0", "from-stdin-1"]
    bad = run("submit", "-", stdin="name: x\nqueue: team-b\ntasks: []\n")
    assert bad.exit_code == 2 and "<stdin>: " in bad.output


def test_a_batch_script_s_flotilla_lines_are_flags_and_the_command_line_wins(
    servers: list[str], store: SqlStore, tmp_path: Path
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n"
        "# a comment\n"
        "#FLOTILLA --queue team-a --cpu 4 --mem 2Gi\n"
        "#FLOTILLA -t 2h -l kind=batch  # trailing comment\n"
        "\n"
        'echo "training $1"\n'
        "#FLOTILLA --gpu 8   (after the first command: not a directive, as #SBATCH)\n"
    )
    result = run("run", "--cpu", "2", str(script), "fast")
    assert result.exit_code == 0, result.output
    (job,) = store.list_jobs().jobs
    spec = job.spec
    assert job.name.startswith("train.sh-") and spec.queue == "team-a"
    assert dict(spec.tasks[0].resources) == {"cpu": 2, "memory": 2 * 2**30}  # --cpu given
    assert (spec.max_runtime, dict(spec.labels)) == (7200, {"kind": "batch"})
    command = ["/bin/bash", "-c", script.read_text(), str(script), "fast"]
    assert (spec.payload or {})["command"] == command


def test_a_bad_flotilla_line_is_exit_2_naming_it(
    servers: list[str], store: SqlStore, tmp_path: Path
) -> None:
    script = tmp_path / "bad.sh"
    script.write_text("#FLOTILLA --cpus 4\ntrue\n")
    result = run("run", str(script))
    assert result.exit_code == 2
    assert "#FLOTILLA line:" in result.output and "--cpus" in result.output
    assert store.list_jobs().jobs == []


def test_the_example_batch_script_is_one_job(servers: list[str], store: SqlStore) -> None:
    script = Path(__file__).parents[2] / "examples" / "jobs" / "train.sh"
    result = run("run", "--dry-run", str(script), "3")
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(result.output)
    assert (spec["name"], spec["max_runtime"], spec["labels"]) == (
        "train-sh",
        300,
        {"kind": "example"},
    )
    assert spec["tasks"][0]["resources"] == {"cpu": 0.5, "memory": "256Mi"}
    assert (
        spec["payload"]["command"][:2] == ["/bin/sh", "-c"]
        and spec["payload"]["command"][-1] == "3"
    )
