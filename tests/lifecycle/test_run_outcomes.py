"""What a job becomes when its run ends: the lifecycle core's one rule set, which the service
and the simulator both apply (``lifecycle/runs.py``)."""

from __future__ import annotations

from typing import Any

from flotilla.lifecycle.runs import EndedAttempt, RunEnd, after_run
from flotilla.lifecycle.states import JobState
from flotilla.model import JobSpec


def spec(retry: dict[str, Any] | None = None) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "train",
            "queue": "q",
            "tasks": [{"name": "m", "resources": {"cpu": 1}}],
            "retry": retry,
        }
    )


def test_without_a_policy_a_failed_command_fails_and_a_lost_node_requeues_uncounted() -> None:
    failed = after_run(spec(), EndedAttempt(RunEnd.FAILED, "exited 3", attempt=1))
    assert (failed.state, failed.reason, failed.counted) == (JobState.FAILED, "exited 3", False)
    lost = after_run(spec(), EndedAttempt(RunEnd.NODE_FAILURE, "cluster c became unreachable", 1))
    assert (lost.state, lost.delay, lost.counted) == (JobState.QUEUED, 0.0, False)


def test_a_covered_end_is_retried_with_its_backoff_then_fails_past_the_limit() -> None:
    policy = {"limit": 2, "backoff": "exponential", "delay": "5s", "on": ["node_failure"]}
    first = after_run(spec(policy), EndedAttempt(RunEnd.NODE_FAILURE, "node gone", 1, failures=0))
    assert (first.state, first.retry, first.delay) == (JobState.QUEUED, 1, 5.0)
    assert first.reason == "retry 1 of 2: attempt 1 ended (node_failure: node gone)"
    assert first.with_backoff_note("t=15") == f"{first.reason}; not before t=15 (5s backoff)"
    second = after_run(spec(policy), EndedAttempt(RunEnd.NODE_FAILURE, "node gone", 2, failures=1))
    assert second.delay == 10.0
    last = after_run(spec(policy), EndedAttempt(RunEnd.NODE_FAILURE, "node gone", 3, failures=2))
    assert last.state is JobState.FAILED and last.counted
    assert last.reason == "node gone (attempt 3, node_failure; retry limit of 2 reached)"
    # a cause the policy does not name: as without a policy
    assert (
        after_run(spec(policy), EndedAttempt(RunEnd.FAILED, "exit 1", 1)).state is JobState.FAILED
    )


def test_the_backoff_grows_with_the_counted_failures_not_with_the_attempts() -> None:
    """Attempts the policy did not count (here: lost nodes, re-queued at once) do not lengthen
    the backoff: the first counted failure waits ``delay``, whatever attempt it was."""
    policy = {"limit": 3, "backoff": "exponential", "delay": "5s", "on": ["failed"]}
    lost = after_run(spec(policy), EndedAttempt(RunEnd.NODE_FAILURE, "node gone", 1))
    assert (lost.state, lost.delay, lost.counted) == (JobState.QUEUED, 0.0, False)
    # attempts 1 and 2 were lost nodes; attempt 3 is the first failure the policy counts
    first = after_run(spec(policy), EndedAttempt(RunEnd.FAILED, "exit 1", 3, failures=0))
    assert (first.state, first.retry, first.delay) == (JobState.QUEUED, 1, 5.0)
    assert first.reason == "retry 1 of 3: attempt 3 ended (failed: exit 1)"
    # another lost node (attempt 4), then attempt 5 fails: the second counted failure
    second = after_run(spec(policy), EndedAttempt(RunEnd.FAILED, "exit 1", 5, failures=1))
    assert (second.retry, second.delay) == (2, 10.0)


def test_a_run_that_ends_after_its_cancel_was_asked_ends_the_job_cancelled() -> None:
    asked = EndedAttempt(RunEnd.FAILED, "killed by SIGTERM", 1, cancel_requested=True)
    outcome = after_run(spec({"limit": 5}), asked)
    assert outcome.state is JobState.CANCELLED and not outcome.counted
    # one that succeeded first keeps its success
    done = EndedAttempt(RunEnd.SUCCEEDED, "", 1, cancel_requested=True)
    assert after_run(spec(), done).state is JobState.SUCCEEDED
