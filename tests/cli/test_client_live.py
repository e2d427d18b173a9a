"""The client commands against a real service in the test process: the real API app over a
real scheduling loop (SQLite, local backend, real processes), no socket.

``logs -f`` follows output a process is still writing, ``wait`` waits for real ends, ``watch``
and ``why`` show what the loop decided. The fake scheduler stays in test_client_commands.py,
whose tests are about the client's own behaviour (arguments, errors, exit codes, tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.live_cli import patience, run
from tests.live_service import (
    LiveService,
    process_gone,
    read_pids,
    sleeper_writing_pids,
)


def test_logs_follow_prints_output_as_it_is_written_until_the_process_ends(
    live: LiveService,
) -> None:
    job_id = live.submit("counter", "echo step 1; sleep 1; echo step 2; sleep 0.3; echo step 3")
    live.wait_until(lambda: live.state(job_id).value == "running", "the job to start")
    result = run("logs", job_id, "-f")
    assert result.exit_code == 0, result.output
    assert result.output == "step 1\nstep 2\nstep 3\n"
    live.wait_until(lambda: live.state(job_id).value == "succeeded", "the job to succeed")


def test_wait_returns_when_the_jobs_end_with_their_outcome(live: LiveService) -> None:
    good = live.submit("good", "sleep 0.3")
    bad = live.submit("bad", "sleep 0.3; exit 4")
    assert live.state(good).value not in ("succeeded", "failed")
    ok = run("wait", good, "--timeout", patience())
    assert ok.exit_code == 0 and f"{good} succeeded" in ok.output
    failed = run("wait", good, bad, "--timeout", patience())
    assert failed.exit_code == 1 and f"{bad} failed" in failed.output
    assert live.store.runs(bad)[-1].exit_code == 4


def test_wait_times_out_with_exit_3_on_a_job_that_cannot_fit(live: LiveService) -> None:
    stuck = live.submit("stuck", "true", cpu=live.cpus * 4)
    result = run("wait", stuck, "--timeout", "0.5")
    assert result.exit_code == 3 and "timed out" in result.output


def test_why_and_watch_show_what_the_loop_decided(live: LiveService) -> None:
    stuck = live.submit("stuck", "true", cpu=live.cpus * 4)
    live.wait_until(lambda: bool(live.loop.pending_reason(stuck)), "a cycle to explain it")
    reason = live.loop.pending_reason(stuck)
    assert reason is not None
    why = run("why", stuck)
    assert why.exit_code == 0, why.output
    assert "cpu" in why.output and "1 of 1 queued in default" in why.output
    watch = run("watch", "--iterations", "1", "--queue", "default")
    assert watch.exit_code == 0, watch.output
    assert stuck[:8] in watch.output and "queued" in watch.output
    assert "no node has" in watch.output  # the REASON column: the loop's own pending reason


def test_cancel_from_the_cli_ends_the_running_process(live: LiveService, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    job_id = live.submit("sleeper", sleeper_writing_pids(pids))
    live.wait_until(lambda: len(read_pids(pids)) == 2, "the job to start")
    live.wait_until(lambda: live.state(job_id).value == "running", "running")
    result = run("cancel", job_id)
    assert result.exit_code == 0, result.output
    live.wait_until(lambda: live.state(job_id).value == "cancelled", "the cancel to finish")
    assert all(process_gone(pid) for pid in read_pids(pids))


def test_resubmitting_a_finished_job_file_works_and_its_name_finds_the_latest(
    live: LiveService, tmp_path: Path
) -> None:
    job_file = tmp_path / "hello.yaml"
    job_file.write_text(json.dumps(live.spec("hello", "echo hello")))
    first = run("submit", str(job_file), "-q").output.strip()
    assert run("wait", "hello", "--timeout", patience()).exit_code == 0
    again = run("submit", str(job_file), "-q")
    assert again.exit_code == 0, again.output
    second = again.output.strip()
    assert second != first
    assert run("wait", "default/hello", "--timeout", patience()).output == f"{second} succeeded\n"
    assert run("logs", "hello").output == "hello\n"


def test_logs_show_both_streams_and_follow_waits_for_a_queued_job_to_start(
    live: LiveService,
) -> None:
    blocker = live.submit("blocker", "sleep 1", cpu=live.cpus)
    live.wait_until(lambda: live.state(blocker).value == "running", "the blocker to start")
    waiter = live.submit("waiter", "echo out; echo err >&2", cpu=live.cpus)
    assert live.state(waiter).value == "queued"
    followed = run("logs", "waiter", "-f")
    assert followed.exit_code == 0, followed.output
    assert (followed.stdout, followed.stderr) == ("out\n", "err\n")
    assert run("logs", waiter, "--stderr").output == "err\n"


def test_run_wait_runs_the_command_and_exits_with_its_outcome(live: LiveService) -> None:
    """``flotilla run --wait -- COMMAND``: submitted, run by a real process, waited for."""
    ok = run("run", "-J", "one-liner", "--cpu", "0.1", "--wait", "--", "echo hello | tr a-z A-Z")
    assert ok.exit_code == 0, ok.output
    assert "succeeded" in ok.output
    assert run("logs", "one-liner").output == "HELLO\n"
    failed = run("run", "--cpu", "0.1", "--wait", "-q", "--", "sh", "-c", "exit 3")
    assert failed.exit_code == 1 and "failed" in failed.output


def test_run_a_batch_script_runs_its_text_with_its_arguments(
    live: LiveService, tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\n#FLOTILLA -J scripted --cpu 0.1\necho "args: $1 $2"\n')
    result = run("run", "--wait", str(script), "a", "b")
    assert result.exit_code == 0, result.output
    assert run("logs", "scripted").output == "args: a b\n"
