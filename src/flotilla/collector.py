"""The garbage collector of a long-running server process (``flotilla up``, ``flotilla serve``).

CPython's cyclic collector runs its youngest generation every 700 net allocations and, every
so often, walks every object the process holds. A server holds a large heap that never becomes
garbage (the imported libraries, the state loaded at start), and a scheduling cycle or a
submission allocates tens of thousands of objects that live on (records, specs, engine jobs):
so the collector kept walking the same live objects, holding the interpreter meanwhile
(figures: ``docs/performance.md``). Objects are still freed by reference counting as soon as
they are unreferenced; only reference cycles wait for the collector.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
"""Net allocations between two collections of the youngest generation (CPython: 700)."""


def settle_collector() -> None:
    """Call once start-up is done: what exists by now is frozen out of the collector's view
    (``gc.freeze``), and the young generation is collected every ``YOUNG_THRESHOLD``
    allocations. Process-wide, as the collector is."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
