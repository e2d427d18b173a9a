"""The dependency table of the lifecycle core: what each ``depends_on`` condition accepts,
as users of Slurm's ``--dependency`` expect it."""

from __future__ import annotations

import pytest

from flotilla.lifecycle.dependencies import ACCEPTED_ENDS, SLURM_EQUIVALENT, Verdict, verdict
from flotilla.lifecycle.states import TERMINAL_JOB_STATES, JobState
from flotilla.model.job import DependencyCondition

C = DependencyCondition


@pytest.mark.parametrize(
    ("condition", "state", "expected"),
    [
        (C.SUCCEEDED, "succeeded", Verdict.MET),
        (C.SUCCEEDED, "cancelled", Verdict.NEVER),
        (C.FINISHED, "cancelled", Verdict.MET),  # afterany: a clean-up after a cancel runs
        (C.FINISHED, "failed", Verdict.MET),
        (C.FAILED, "cancelled", Verdict.MET),  # afternotok
        (C.FAILED, "succeeded", Verdict.NEVER),
        (C.FINISHED_NOT_CANCELLED, "cancelled", Verdict.NEVER),  # the old `finished`
        (C.FAILED_NOT_CANCELLED, "cancelled", Verdict.NEVER),  # the old `failed`
        (C.FINISHED, "preempted", Verdict.WAITING),  # re-queued: not an end
        (C.FINISHED, "running", Verdict.WAITING),
        (C.FINISHED, None, Verdict.WAITING),
    ],
)
def test_each_condition_accepts_the_ends_its_documented_row_names(
    condition: DependencyCondition, state: str | None, expected: Verdict
) -> None:
    assert verdict(condition, state) is expected


def test_every_condition_accepts_only_ends_and_has_a_slurm_row() -> None:
    terminal = {state.value for state in TERMINAL_JOB_STATES}
    for condition in DependencyCondition:
        assert ACCEPTED_ENDS[condition] and ACCEPTED_ENDS[condition] <= terminal
        assert condition in SLURM_EQUIVALENT
    assert ACCEPTED_ENDS[C.FINISHED] == terminal
    assert ACCEPTED_ENDS[C.FAILED] == terminal - {JobState.SUCCEEDED.value}


# Every condition against every end, written out here (not derived from the table under
# test): a skipped dependency (the branch not taken) ended, without succeeding or failing.
EVERY_END = {
    #                          succeeded  failed  cancelled  skipped
    C.SUCCEEDED: ("met", "never", "never", "never"),
    C.FINISHED: ("met", "met", "met", "met"),
    C.FAILED: ("never", "met", "met", "met"),
    C.FINISHED_NOT_CANCELLED: ("met", "met", "never", "never"),
    C.FAILED_NOT_CANCELLED: ("never", "met", "never", "never"),
}


@pytest.mark.parametrize("condition", list(C), ids=lambda condition: condition.value)
@pytest.mark.parametrize("end", ["succeeded", "failed", "cancelled", "skipped"])
def test_each_condition_against_each_end_skipped_included(
    condition: DependencyCondition, end: str
) -> None:
    expected = EVERY_END[condition][["succeeded", "failed", "cancelled", "skipped"].index(end)]
    assert verdict(condition, end) is Verdict(expected)
