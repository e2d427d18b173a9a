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
and so is, after every pass of the middle or the oldest generation, what survived it: the
next full pass walks only what was allocated since the last middle pass, and each pass stays
short. (Freezing after full passes only left the server's new long-lived state — the records,
specs and engine jobs of 10,000 jobs just submitted — to the next full pass, which then
walked all of it at once: 100–270 ms with the whole process stopped, GET under submit in
``docs/performance.md``.) The youngest
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

MIDDLE = 1
"""The generation whose survivors, and the oldest's, are frozen after each of its passes."""


def settle_collector() -> None:
    """Call once start-up is done: what exists by now is frozen (``gc.freeze``), and from
    now on so is what survives each pass of the middle or oldest generation. Process-wide,
    as the collector is."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def _freeze_survivors(phase: str, info: Mapping[str, int]) -> None:
    """After a middle or full pass, freeze what survived it: it has just been walked and
    found live, and every younger object went through the pass (the youngest generation is
    empty after it), so nothing just allocated is frozen with it."""
    if phase == "stop" and info["generation"] >= MIDDLE:
        gc.freeze()
