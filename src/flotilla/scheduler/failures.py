"""Remembered placement failures: "no node fits" and the filters' explanation, per profile.

Why: the simulator runs a scheduling cycle per event, and a job's arrival does not change any
node table, so without it the same requests that did not fit are filtered and explained
again on the same node state cycle after cycle; explaining is the costly part of a failed
placement (``docs/performance.md``). When every filter and score of a profile is row-local,
whether a request fits and what the filters say about it depend only on the node table's
content and the request's placement-relevant fields, i.e. on ``(NodeTable.version,
node_index.placement_key)``: a verdict found once holds for every copy of the table until it
changes.

The cache is bounded (least recently used entries dropped first) and lives in the
``EngineCaches`` of one profile (``scheduler.caches``), so it goes away with the scheduler
that owns it; entries of
versions no table holds any more are never asked for again and age out.
"""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from flotilla.framework.versions import Version

FailureKey = tuple[Version, tuple[object, ...]]
"""``(NodeTable.version, node_index.placement_key(job, task))``."""

CAPACITY = 4096
"""Entries kept per profile: each is a key and a short sentence, well under a KiB."""


class FailureCache:
    """``FailureKey`` → the explanation's details (the text after the head, ``""`` when no
    filter had anything to say) for requests that no node of the table can take.

    A lock keeps the recency order consistent when the service's loop and an async
    scheduling round place jobs with the same profile at once."""

    __slots__ = ("_entries", "_lock", "capacity")

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[FailureKey, str] = OrderedDict()
        self._lock = Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: FailureKey) -> str | None:
        """The details remembered for ``key``, or ``None`` when the request may fit."""
        with self._lock:
            details = self._entries.get(key)
            if details is not None:
                self._entries.move_to_end(key)
            return details

    def put(self, key: FailureKey, details: str) -> None:
        """Remember that nothing fits ``key``, and why."""
        with self._lock:
            self._entries[key] = details
            self._entries.move_to_end(key)
            if len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
