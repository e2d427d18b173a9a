"""Cancel latency with the API and the scheduler in separate processes (Armada's shape).

``flotilla up --no-api --mode async`` (the scheduler, the local cluster) and ``flotilla
serve`` (the API) over one database; the client drives the API exactly as ``service-cancel``
drives ``flotilla up`` (``bench/service.py``: an unplaceable backlog keeps rounds in flight,
running ``sleep`` jobs are cancelled one by one, then queued ones). The API process cannot wake
the scheduler: the scheduler finds a cancel at its next transitions pass (every
``TRANSITION_SECONDS`` while a round is in flight). Both processes append to one stage trace.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from bench.cancel_trace import cancel_timelines, per_cancel, read_trace, step_summary
from bench.service import _cancel_phases, _scratch_database
from bench.split import scheduler_and_api
from flotilla.stage_trace import ENVIRONMENT


def run_split_cancel(
    backlog: int = 70_000,
    cancellable: int = 100,
    queued_cancels: int = 20,
    database: str = "postgresql",
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(tmp, database) as url:
        work = Path(tmp)
        trace_file = work / "trace.jsonl"
        previous = os.environ.get(ENVIRONMENT)
        os.environ[ENVIRONMENT] = str(trace_file)  # both processes inherit it
        try:
            arguments = ("--mode", "async", "--cycle-interval", "0.1")
            with scheduler_and_api(work, url, *arguments) as http:
                result = _cancel_phases(http, backlog, cancellable, queued_cancels)
        finally:
            if previous is None:
                os.environ.pop(ENVIRONMENT, None)
            else:
                os.environ[ENVIRONMENT] = previous
        timelines = cancel_timelines(read_trace(trace_file), result.pop("client_times"))
    result["params"].update(database=database, processes="flotilla serve + flotilla up --no-api")
    result["cancel_steps"] = step_summary(timelines)
    result["cancel_traces"] = per_cancel(timelines)
    return result
