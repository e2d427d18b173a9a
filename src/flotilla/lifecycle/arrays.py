"""Array parallelism: the one rule, kept per array by the service and the simulator alike.

An array with ``parallelism`` K (Slurm's ``--array=…%K``) has at most K elements offered to
the scheduler or active (leased, pending, running) at once. The others wait in index order
and are offered when an element ends or goes back to waiting (preempted, re-queued, retried:
it gives up its slot and asks again, in its turn). Kept incrementally — a set per kind and a
heap of held elements by index — never by scanning the backlog.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass
class ArrayThrottle:
    """One throttled array's slots; members are job ids (service) or names (simulator)."""

    parallelism: int
    active: set[str] = field(default_factory=set)
    """Elements leased, pending or running."""
    offered: set[str] = field(default_factory=set)
    """Queued elements that hold a slot: offered to the scheduler."""
    _held: list[tuple[int, str]] = field(default_factory=list)
    _held_ids: set[str] = field(default_factory=set)

    def room(self) -> int:
        return self.parallelism - len(self.active) - len(self.offered)

    @property
    def idle(self) -> bool:
        """Nothing active, offered or held: the array may be forgotten."""
        return not (self.active or self.offered or self._held_ids)

    @property
    def holds_some(self) -> bool:
        return bool(self._held_ids)

    def offer(self, member: str, index: int) -> bool:
        """Whether the queued ``member`` may be offered now (it then holds a slot); if not, it
        waits in index order until ``release`` hands it one."""
        if member in self.offered or member in self.active:
            return True
        if self.room() > 0:
            self.offered.add(member)
            self._held_ids.discard(member)
            return True
        if member not in self._held_ids:
            heapq.heappush(self._held, (index, member))
            self._held_ids.add(member)
        return False

    def activate(self, member: str) -> None:
        """The element was leased (or is running): its slot is an active one now."""
        self.offered.discard(member)
        self._held_ids.discard(member)
        self.active.add(member)

    def deactivate(self, member: str) -> None:
        """The element is no longer active (it ended, or went back to waiting)."""
        self.active.discard(member)

    def leave(self, member: str) -> None:
        """The element is no longer offered nor waiting for a slot (it left the queue)."""
        self.offered.discard(member)
        self._held_ids.discard(member)

    def release(self) -> list[str]:
        """The held elements that get a slot now, lowest index first (each now offered)."""
        released: list[str] = []
        while self.room() > 0 and self._held:
            _, member = heapq.heappop(self._held)
            if member in self._held_ids:
                self._held_ids.discard(member)
                self.offered.add(member)
                released.append(member)
        return released

    def reason(self, label: str) -> str:
        """Why an element waits for a slot."""
        return (
            f"array {label}: {len(self.active) + len(self.offered)} of its elements are running "
            f"or offered to the scheduler, its parallelism is {self.parallelism}"
        )
