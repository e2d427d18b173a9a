"""Content versions of node tables: equal versions mean equal content.

Why: what the framework computes from a table's content alone (a request that fits
nowhere, and the filters' explanation of it, ``scheduler.failures``) can be remembered
under the table's version and reused by every copy, round and cycle that meets the same
content again — and the simulator meets it again all the time: a cycle per event, most of
them changing little or nothing.

A version is a ``Version`` token: an object compared by identity, so two tables — or two
schedulers — can never hand out the same version for different content, and no process-wide
counter is needed. Each table owns one ``ContentVersions`` (made with it, shared by its
copies: they have the same static part), which names its content in one of two ways, by
table size:

* Tables under ``CONTENT_ADDRESSED_NODES`` nodes are named by their content itself: each
  row's state (its bytes) is interned to a row id, and the version is interned from the
  row ids, computed when asked after a change. Equal content is then always the same
  version, however it was reached (a job finishing and another of the same shape taking its
  place, releases in another order).
* Larger tables would pay a pass over every row per question, so every change takes a
  fresh version; copies keep theirs until they change. (Naming paths instead — the same
  operation on the same version memoised, an exact undo returning to the version before —
  measured slower: ``docs/performance.md``.)

Both memos are bounded and emptied when full; row ids are never reused within a table's
family, and a forgotten version only means equal content may get a second name, never that
different content shares one.
"""

from __future__ import annotations

from itertools import count

CONTENT_ADDRESSED_NODES = 512
"""Tables with fewer nodes are content-addressed (their row ids are a few KiB at most)."""

ROW_IDS_LIMIT = 16384
CONTENTS_LIMIT = 4096
"""Entries kept by each memo before it is emptied: a few MiB each at most."""


class Version:
    """Names one content of one table family; compared (and hashed) by identity."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<Version {id(self):#x}>"


class ContentVersions:
    """The version memos of one node table and its copies (see the module docstring).

    Not locked: a table and its copies are changed by one thread at a time (a scheduling
    round works on its own copies; the caller's table is changed between rounds). Two threads
    interning at once could only give equal content two names, never two contents one."""

    __slots__ = ("_contents", "_next_row_id", "_row_ids")

    def __init__(self) -> None:
        self._next_row_id = count()
        self._row_ids: dict[bytes, int] = {}
        self._contents: dict[bytes, Version] = {}

    @staticmethod
    def fresh() -> Version:
        """A version no content has had yet."""
        return Version()

    def row_id(self, state: bytes) -> int:
        """The id of one row's state: equal bytes, equal id (while remembered)."""
        known = self._row_ids.get(state)
        if known is None:
            if len(self._row_ids) >= ROW_IDS_LIMIT:
                self._row_ids.clear()
            known = self._row_ids[state] = next(self._next_row_id)
        return known

    def content_version(self, row_ids: bytes) -> Version:
        """The version of the content made of the family's static part and these rows."""
        known = self._contents.get(row_ids)
        if known is None:
            if len(self._contents) >= CONTENTS_LIMIT:
                self._contents.clear()
            known = self._contents[row_ids] = Version()
        return known
