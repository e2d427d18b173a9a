"""Profile the service's submit → scheduled path: ``python -m bench.profile_service --database
postgresql`` (or ``sqlite``).

Runs ``bench.service.run_submit_to_scheduled`` (the ``service-throughput`` cases) with cProfile
enabled in the scheduler thread and in the API thread, and writes each thread's top functions by
cumulative time to ``<out>/service-throughput-<database>.<thread>.cprofile.txt``. cProfile's
per-call overhead inflates small Python functions; time spent waiting on the database
(``psycopg``'s ``wait``, SQLite's ``execute``) is shown as it is.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent / "docs" / "profiles"


def _profiled(
    original: Callable[..., Any], label: str, profiles: dict[str, cProfile.Profile]
) -> Callable[..., Any]:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        profile = cProfile.Profile()
        profiles[label] = profile
        profile.enable()
        try:
            return original(self, *args, **kwargs)
        finally:
            profile.disable()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_service")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--out", type=Path, default=DOCS)
    parser.add_argument("--top", type=int, default=40)
    arguments = parser.parse_args()

    import uvicorn

    from bench.service import run_submit_to_scheduled
    from flotilla.service.loop import SchedulingLoop

    profiles: dict[str, cProfile.Profile] = {}
    SchedulingLoop.run = _profiled(SchedulingLoop.run, "scheduler", profiles)  # type: ignore[method-assign]
    uvicorn.Server.run = _profiled(uvicorn.Server.run, "api", profiles)  # type: ignore[method-assign]
    result = run_submit_to_scheduled(jobs=arguments.jobs, database=arguments.database)
    arguments.out.mkdir(parents=True, exist_ok=True)
    header = (
        f"# service-throughput on {arguments.database}, {arguments.jobs} jobs, under cProfile\n"
        f"# command: python3 -m uv run python -m bench.profile_service --database "
        f"{arguments.database}\n"
        f"# submit {result['submit_jobs_per_s']:,.0f} jobs/s; submit → scheduled "
        f"{result['submit_to_scheduled_jobs_per_s']:,.0f} jobs/s (profiler overhead included); "
        f"measured {time.strftime('%Y-%m-%d')}\n\n"
    )
    for label, profile in profiles.items():
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(arguments.top)
        path = arguments.out / f"service-throughput-{arguments.database}.{label}.cprofile.txt"
        path.write_text(header + text.getvalue())
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
