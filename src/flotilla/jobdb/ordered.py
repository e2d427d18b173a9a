"""Copy-on-write ordered index: a sorted tuple per key, edited as one list per transaction.

A snapshot shares the tuples of every key a write transaction did not touch; a touched key is
copied once per transaction, whatever the number of changes, and frozen again on commit.
"""

from __future__ import annotations

from bisect import bisect_left, insort

QueueKey = tuple[int, int, str]
"""Order within a queue: (-priority, submit serial, job id): higher priority first, then
submission order; the id makes keys unique."""

Item = QueueKey


class OrderedEdit:
    """Pending changes to one sorted tuple: removals and additions, applied on demand."""

    def __init__(self, base: tuple[Item, ...]) -> None:
        self._base = base
        self._removed: set[Item] = set()
        self._added: set[Item] = set()
        self._result: tuple[Item, ...] | None = base

    def add(self, item: Item) -> None:
        self._removed.discard(item)
        self._added.add(item)
        self._result = None

    def remove(self, item: Item) -> None:
        if item in self._added:
            self._added.discard(item)
        else:
            self._removed.add(item)
        self._result = None

    def result(self) -> tuple[Item, ...]:
        if self._result is None:
            self._result = self._apply()
        return self._result

    def _apply(self) -> tuple[Item, ...]:
        changes = len(self._added) + len(self._removed)
        if changes * 8 > len(self._base):
            kept = [item for item in self._base if item not in self._removed]
            return tuple(sorted(set(kept) | self._added))
        items = list(self._base)
        for item in self._removed:
            index = bisect_left(items, item)
            if index < len(items) and items[index] == item:
                del items[index]
        for item in self._added:
            index = bisect_left(items, item)
            if index == len(items) or items[index] != item:
                insort(items, item)
        return tuple(items)
