"""The ``flotilla`` command line.

A client command imports what it runs and nothing more (docs/performance.md, CLI start-up):
each command's module imports the SDK, rich and the specs where it uses them, and the server
side (store, engine, FastAPI) only under ``up`` and ``serve``. ``tests/cli/test_start_up.py``
holds this.
"""

import sys

if "httpx" not in sys.modules:
    # ``import httpx`` imports httpx's own command line (``httpx._main``: click, rich,
    # pygments) only to offer it as ``httpx.main``, and falls back to a stub when its extra
    # (``httpx[cli]``) is not installed. Flotilla never runs it; marking it absent, as the
    # import system allows, spares every client command about a third of its start.
    sys.modules["httpx._main"] = None  # type: ignore[assignment]
