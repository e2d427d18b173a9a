"""Array parallelism, the lifecycle core's rule that the service and the simulator share."""

from __future__ import annotations

from flotilla.lifecycle.arrays import ArrayThrottle


def test_at_most_k_elements_hold_a_slot_and_the_rest_get_one_in_index_order() -> None:
    throttle = ArrayThrottle(parallelism=2)
    assert [throttle.offer(f"e{i}", i) for i in (3, 0, 1, 2)] == [True, True, False, False]
    assert throttle.reason("sweep") == (
        "array sweep: 2 of its elements are running or offered to the scheduler, "
        "its parallelism is 2"
    )
    throttle.activate("e3")
    throttle.deactivate("e3")  # e3 ended
    assert throttle.release() == ["e1"]  # the lowest index waiting, not the first to ask
    assert throttle.offer("e1", 1)  # already offered: idempotent
    assert throttle.release() == []


def test_an_element_that_goes_back_to_waiting_asks_again_behind_those_held() -> None:
    throttle = ArrayThrottle(parallelism=1)
    assert throttle.offer("e0", 0)
    throttle.activate("e0")
    assert not throttle.offer("e1", 1)
    throttle.deactivate("e0")  # preempted: re-queued
    throttle.leave("e0")
    assert throttle.release() == ["e1"]
    assert not throttle.offer("e0", 0)
    throttle.leave("e1")  # e1 left the queue (cancelled)
    assert throttle.release() == ["e0"]
    throttle.leave("e0")
    assert throttle.idle
