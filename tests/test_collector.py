"""The server's garbage collector: what survived a full pass is not walked again."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from flotilla.collector import _freeze_survivors, settle_collector


@pytest.fixture
def settled() -> Iterator[None]:
    thresholds = gc.get_threshold()
    settle_collector()
    try:
        yield
    finally:
        gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def walked_by_the_collector(objects: list[list[int]]) -> int:
    """How many of ``objects`` a future pass would still walk (frozen ones are left out of
    ``gc.get_objects``). Counted by identity, not by ``gc.get_freeze_count``: frozen objects
    that other code frees meanwhile make that count fall."""
    wanted = {id(item) for item in objects}
    return sum(1 for item in gc.get_objects() if id(item) in wanted)


def test_what_survives_a_full_pass_is_left_out_of_the_next_one(settled: None) -> None:
    live = [[index] for index in range(1_000)]  # long-lived state made after start-up
    gc.collect()
    assert walked_by_the_collector(live) == 0
    assert gc.get_objects(generation=2) == []  # the next full pass has nothing old to walk


def test_garbage_cycles_made_since_the_last_pass_are_still_collected(settled: None) -> None:
    class Node:
        other: object = None

    gc.collect()
    first, second = Node(), Node()
    first.other, second.other = second, first
    del first, second
    assert gc.collect() >= 2


def test_settling_twice_installs_one_callback(settled: None) -> None:
    settle_collector()
    assert gc.callbacks.count(_freeze_survivors) == 1


def test_what_survives_a_middle_pass_is_frozen_too(settled: None) -> None:
    # State made by a large submission reaches the oldest generation through middle passes;
    # left there, the next full pass walked all of it at once.
    gc.collect()
    live = [[index] for index in range(1_000)]
    gc.collect(1)
    assert walked_by_the_collector(live) == 0
    assert gc.get_objects(generation=2) == []
