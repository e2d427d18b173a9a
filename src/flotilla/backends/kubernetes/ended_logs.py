"""The logs of pods whose container has ended, read once and served from memory.

The log API has no byte offset: a reader that follows a log in chunks (``flotilla logs``, the
SDK, the dashboard: 64 KiB at a time) made the backend ask for the first ``offset + limit``
bytes each time, so a 24 MB log cost 25 s of re-reading. A running pod's log grows and is
read as before; an ended pod's log never changes, so its first read takes up to
``READ_BYTES`` and the following chunks come from that copy. Bounded: ``TOTAL_BYTES`` in all,
the least recently read copy dropped first; a log longer than ``READ_BYTES`` is read past it
as before. Keyed by the pod's uid (a pod of the same name is another log).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

READ_BYTES = 32 * 2**20
TOTAL_BYTES = 128 * 2**20


class EndedLogs:
    """Copies of ended pods' logs by pod uid. Thread-safe."""

    def __init__(self, read: Callable[[str, int], bytes]) -> None:
        self._read = read
        """``(pod name, limit bytes) -> the log's first bytes``."""
        self._lock = threading.Lock()
        self._copies: OrderedDict[str, tuple[bytes, bool]] = OrderedDict()
        """Pod uid -> (its log's first bytes, whether that is the whole log)."""
        self._size = 0

    def read(self, pod_name: str, pod_uid: str, wanted: int) -> bytes:
        """The first ``wanted`` bytes (or fewer: the whole log) of an ended pod's log."""
        with self._lock:
            found = self._copies.get(pod_uid)
            if found is not None and (found[1] or len(found[0]) >= wanted):
                self._copies.move_to_end(pod_uid)
                return found[0][:wanted]
        limit = max(wanted, READ_BYTES)
        data = self._read(pod_name, limit)
        if not data:
            return data  # gone, or not readable now: nothing worth keeping
        with self._lock:
            old = self._copies.pop(pod_uid, None)
            if old is not None:
                self._size -= len(old[0])
            self._copies[pod_uid] = (data, len(data) < limit)
            self._size += len(data)
            while self._size > TOTAL_BYTES and len(self._copies) > 1:
                _, (dropped, _) = self._copies.popitem(last=False)
                self._size -= len(dropped)
        return data[:wanted]
