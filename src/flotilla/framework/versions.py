"""Content versions of node tables: equal versions mean equal content.

Why: what the framework computes from a table's content alone (a request that fits
nowhere, and the filters' explanation of it, ``framework.failures``) can be remembered
under the table's version and reused by every copy, run and cycle that meets the same
content again — and the simulator meets it again all the time: a cycle per event, most of
them changing little or nothing.

Two ways of naming content, by table size:

* Tables under ``CONTENT_ADDRESSED_NODES`` nodes are named by their content itself: each
  row's state (its bytes) is interned to a row id, and the version is interned from the
  table's identity and its row ids, computed when asked after a change. Equal content is
  then always the same version, however it was reached (a job finishing and another of the
  same shape taking its place, releases in another order).
* Larger tables would pay a pass over every row per question, so every change takes a
  fresh version; copies keep theirs until they change. (Naming paths instead — the same
  operation on the same version memoised, an exact undo returning to the version before —
  was tried: ``scale-nodes-1k`` went from 82 to 99 µs per placement in one run under load.)

Both memos here are bounded and emptied when full; ids and versions are never reused, so
a forgotten entry only means equal content may get a second name, never that different
content shares one.
"""

from __future__ import annotations

from itertools import count

CONTENT_ADDRESSED_NODES = 512
"""Tables with fewer nodes are content-addressed (their row ids are a few KiB at most)."""

_ROW_IDS_LIMIT = 16384
_CONTENTS_LIMIT = 4096
"""Entries kept by each memo before it is emptied: a few MiB each at most."""

_counter = count()
_row_ids: dict[bytes, int] = {}
_contents: dict[tuple[int, bytes], int] = {}


def fresh() -> int:
    """A version (or table identity) no content has had yet."""
    return next(_counter)


def row_id(state: bytes) -> int:
    """The id of one row's state: equal bytes, equal id (while remembered)."""
    known = _row_ids.get(state)
    if known is None:
        if len(_row_ids) >= _ROW_IDS_LIMIT:
            _row_ids.clear()
        known = _row_ids[state] = next(_counter)
    return known


def content_version(table: int, row_ids: bytes) -> int:
    """The version of the content made of ``table``'s static part and these rows."""
    key = (table, row_ids)
    known = _contents.get(key)
    if known is None:
        if len(_contents) >= _CONTENTS_LIMIT:
            _contents.clear()
        known = _contents[key] = next(_counter)
    return known
