"""``flotilla up --mode async``: cancels take effect while a slow scheduling round is in flight.

The round is made slow by a test-only ``sitecustomize`` on the server's ``PYTHONPATH``
(``slow_round_hook/``): while a switch file exists, each algorithm round waits that many seconds
on its snapshot before deciding. The test turns it on once a job is running, then submits two
more jobs; the round triggered for them is the slow one. During it:

* the running job is cancelled and its run stopped — the loop keeps cycling while the
  algorithm works, so the cancel does not wait for the round;
* one of the two queued jobs is cancelled; the in-flight round decided on a snapshot in which it
  was still queued, and reconciliation must drop that decision: it never runs.

The other queued job proves the slow round's result was committed after the cancels.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.service import Services, job_spec, wait_for

HOOK = Path(__file__).with_name("slow_round_hook")
SLOW_ROUND = 5.0


def test_cancels_take_effect_during_a_slow_async_round(services: Services, tmp_path: Path) -> None:
    switch, marks = tmp_path / "slow-round-seconds", tmp_path / "marks"
    server = services.start(
        db=f"sqlite:///{tmp_path / 'f.db'}",
        state_dir=tmp_path / "runs",
        extra=["--mode", "async", "--cycle-interval", "0.1"],
        env={"PYTHONPATH": str(HOOK), "FLOTILLA_E2E_SLOW_ROUND": str(switch)},
    )
    [running] = server.submit(job_spec("running", ["sleep", "60"]))
    server.wait_states([running], frozenset({"running"}), limit=30)
    wait_for(lambda: server.report()["scheduler"]["runner_state"] == "idle", 30, "an idle runner")

    switch.write_text(str(SLOW_ROUND))
    command = f'echo "$FLOTILLA_JOB_NAME" >> {marks}'
    doomed, kept = server.submit(job_spec("doomed", command), job_spec("kept", command))
    wait_for(
        lambda: server.report()["scheduler"]["runner_state"] == "running",
        30,
        "the slow round to start",
    )
    assert server.cancel(doomed)["state"] == "cancelled"  # waiting: cancelled at once
    assert server.cancel(running)["cancel_requested"]
    server.wait_states([running], limit=30)
    assert server.state(running) == "cancelled"
    # The slow round has not committed yet: the cancel did not wait for it.
    assert server.state(kept) == "queued", "the slow round ended before the cancel took effect"

    switch.unlink()
    assert server.wait_states([kept], limit=30) == {kept: "succeeded"}
    assert server.state(doomed) == "cancelled"
    assert server.job(doomed)["runs"] == []
    assert marks.read_text().split() == ["kept"], "the cancelled job ran"
