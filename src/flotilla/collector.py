"""The garbage collector of a long-running server process (``flotilla up``, ``flotilla serve``).

CPython's cyclic collector runs its youngest generation every 700 net allocations and, every
so often, walks every object the process holds. A server holds a large heap that never becomes
garbage (the imported libraries, the state loaded at start), and a scheduling cycle or a
submission allocates tens of thousands of objects that live on (records, specs, engine jobs):
so the collector kept walking the same live objects, holding the interpreter meanwhile — the
whole process, the API and a cancel's way included, stood still for each pass (figures:
``docs/performance.md``). Objects are still freed by reference counting as soon as they are
unreferenced; only reference cycles wait for the collector.

So what exists once start-up is done is frozen out of the collector's view (``gc.freeze``),
and so is, after every full pass, what survived it: the next full pass walks only what was
allocated since, and each pass stays short. The youngest
generation is collected every ``YOUNG_THRESHOLD`` allocations: often enough that its passes,
and the middle generation's (ten of them), stay short too. The price: a
reference cycle among frozen objects that later becomes garbage is not collected. The
server's long-lived objects (records, specs, engine jobs) hold no cycles, and the 200,000-job
soak keeps a flat resident memory with this policy (``docs/performance.md``).
"""

from __future__ import annotations

import gc
from collections.abc import Mapping

YOUNG_THRESHOLD = 5_000
"""Net allocations between two collections of the youngest generation (CPython: 700). Fewer
collections cost less CPU; but a middle-generation pass walks up to ten times this many
objects, so a much larger one stops the process for long (``docs/performance.md``)."""

OLDEST = 2
"""The generation a full pass collects."""


def settle_collector() -> None:
    """Call once start-up is done: what exists by now is frozen (``gc.freeze``), and from
    now on so is what survives each full pass. Process-wide, as the collector is."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def _freeze_survivors(phase: str, info: Mapping[str, int]) -> None:
    """After a full pass, freeze what survived it: it has just been walked and found live."""
    if phase == "stop" and info["generation"] == OLDEST:
        gc.freeze()
