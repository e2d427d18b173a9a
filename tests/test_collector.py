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


def test_what_survives_a_full_pass_is_left_out_of_the_next_one(settled: None) -> None:
    frozen = gc.get_freeze_count()
    live = [[index] for index in range(1_000)]  # long-lived state made after start-up
    assert gc.get_freeze_count() == frozen
    gc.collect()
    assert gc.get_freeze_count() >= frozen + len(live)
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
