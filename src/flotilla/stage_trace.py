"""Timestamped traces of one request's way through the service, for the benchmarks.

Off in production: armed only by the environment variable ``FLOTILLA_STAGE_TRACE`` (not
``FLOTILLA_TRACES``, which installs OpenTelemetry exporters: ``tracing.py``), read once at
import (as ``faults.py`` reads ``FLOTILLA_FAULT``). Unset (the default), ``trace`` is one
comparison against None. Set to a file path, every ``trace`` call appends one JSON line to that
file::

    {"job": "…", "stage": "api-received", "at": 1764000000.123456, "pid": 4242}

``at`` is wall-clock time (``time.time()``), so the lines of several processes on one machine
(an API process and a scheduler process) can be put on one time line. Each line is written with
one ``write`` on a file opened for appending, so lines of concurrent writers never interleave.

The stages of a cancel (``CANCEL_STAGES``, in the order they happen):

- ``api-received``: the API began handling ``POST /v1/jobs/{id}/cancel``.
- ``store-written``: the cancel request is committed in the store.
- ``loop-woken``: the scheduling loop woke up for new work (no job: the first one after a
  job's ``store-written`` is the one that job caused).
- ``loop-seen``: the loop found the job's cancel request after syncing from the store.
- ``backend-signalled``: the backend was asked to stop the run (SIGTERM sent, for ``local``).
- ``exit-observed``: the loop received the backend's report that the run ended.
- ``state-committed``: the job's ``cancelled`` state is committed in the store.
"""

from __future__ import annotations

import json
import os
import time

ENVIRONMENT = "FLOTILLA_STAGE_TRACE"

CANCEL_STAGES = (
    "api-received",
    "store-written",
    "loop-woken",
    "loop-seen",
    "backend-signalled",
    "exit-observed",
    "state-committed",
)

_PATH = os.environ.get(ENVIRONMENT) or None


def trace(stage: str, job: str | None = None) -> None:
    """Append one line for ``stage`` (of ``job``, if any) to the trace file, if armed."""
    if _PATH is None:
        return
    line = json.dumps({"job": job, "stage": stage, "at": time.time(), "pid": os.getpid()})
    descriptor = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)
