"""Profile the engine on one case: ``python -m bench.profile --case headline-5k``.

Only ``SchedulingAlgorithm.schedule`` runs under the profilers (fleet and job building,
prefill and the harness's own bookkeeping are left out). Writes two text files:

* ``<out>/<case>.pyinstrument.txt`` — pyinstrument's call tree (statistical, low overhead);
* ``<out>/<case>.cprofile.txt`` — cProfile, top functions by own time (exact counts, but
  its per-call overhead inflates small Python functions).
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

from bench.cases import ENGINE_CASES
from bench.engine import run_engine_case
from flotilla.scheduler import CycleResult, SchedulingAlgorithm, SchedulingSnapshot

DOCS = Path(__file__).resolve().parent.parent / "docs" / "profiles"


def _wrap(start: Callable[[], None], stop: Callable[[], None]) -> Callable[[], None]:
    original = SchedulingAlgorithm.schedule

    def schedule(self: SchedulingAlgorithm, snapshot: SchedulingSnapshot) -> CycleResult:
        start()
        try:
            return original(self, snapshot)
        finally:
            stop()

    SchedulingAlgorithm.schedule = schedule  # type: ignore[method-assign]

    def restore() -> None:
        SchedulingAlgorithm.schedule = original  # type: ignore[method-assign]

    return restore


def profile_case(
    name: str, out: Path, cycles: int | None = None, jobs: int | None = None
) -> list[Path]:
    from dataclasses import replace

    from pyinstrument import Profiler

    case = ENGINE_CASES[name]
    if cycles is not None:
        case = replace(case, cycles=cycles)
    if jobs is not None:
        case = replace(case, workload=replace(case.workload, jobs=jobs))
    out.mkdir(parents=True, exist_ok=True)
    options = (f" --cycles {cycles}" if cycles is not None else "") + (
        f" --jobs {jobs}" if jobs is not None else ""
    )
    header = (
        f"# case {name}{options}: {case.description}\n"
        f"# command: python3 -m uv run python -m bench.profile --case {name}{options}\n"
    )
    if jobs is not None:
        header += f"# the backlog is overridden to {jobs:,} jobs\n"
    written = []

    profiler = Profiler(interval=0.001)
    restore = _wrap(profiler.start, profiler.stop)
    try:
        result = run_engine_case(case, measure_memory=False)
    finally:
        restore()
    summary = _summary(result)
    text = profiler.output_text(unicode=True, color=False, show_all=False)
    path = out / f"{name}.pyinstrument.txt"
    path.write_text(header + summary + text)
    written.append(path)

    profile = cProfile.Profile()
    restore = _wrap(profile.enable, profile.disable)
    try:
        result = run_engine_case(case, measure_memory=False)
    finally:
        restore()
    buffer = io.StringIO()
    stats = pstats.Stats(profile, stream=buffer)
    stats.sort_stats("tottime").print_stats(30)
    path = out / f"{name}.cprofile.txt"
    path.write_text(header + _summary(result) + _trim(buffer.getvalue()))
    written.append(path)
    return written


def profile_philly(limit: int | None, out: Path) -> Path:
    """pyinstrument over the whole replay (conversion, validation, simulation, report)."""
    from pyinstrument import Profiler

    from bench.philly import run_philly

    out.mkdir(parents=True, exist_ok=True)
    label = "philly" if limit is None else f"philly-{limit}"
    profiler = Profiler(interval=0.001)
    profiler.start()
    result = run_philly(limit=limit)
    profiler.stop()
    header = (
        f"# Philly replay, {result['params']['jobs']:,} jobs, whole run under pyinstrument\n"
        f"# command: python3 -m uv run python -m bench.profile --philly {limit or 0}\n"
        f"# under this profiler: end to end {result['end_to_end_s']:.1f}s, simulate "
        f"{result['simulate_s']:.1f}s, schedule() {result['engine_s']:.1f}s over "
        f"{result['executed_cycles']} cycles; measured {time.strftime('%Y-%m-%d')}\n\n"
    )
    path = out / f"{label}.pyinstrument.txt"
    path.write_text(header + profiler.output_text(unicode=True, color=False))
    return path


def _trim(text: str) -> str:
    root = str(Path(__file__).resolve().parent.parent)
    return text.replace(root + "/", "")


def _summary(result: dict[str, Any]) -> str:
    return (
        f"# under this profiler: {result['cycle_count']} cycles, {result['placements']} placed, "
        f"{result['decisions']} decisions, schedule() total {result['engine_s']:.2f}s "
        f"(profiler overhead included); measured {time.strftime('%Y-%m-%d')}\n\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--case", action="append", default=[], choices=sorted(ENGINE_CASES))
    parser.add_argument("--jobs", type=int, help="override the case's backlog size")
    parser.add_argument("--philly", type=int, help="profile the Philly replay (N jobs, 0 = all)")
    parser.add_argument("--out", type=Path, default=DOCS)
    parser.add_argument("--cycles", type=int, help="override the case's cycle count")
    args = parser.parse_args()
    for name in args.case:
        for path in profile_case(name, args.out, args.cycles, args.jobs):
            print(f"wrote {path}")
    if args.philly is not None:
        print(f"wrote {profile_philly(args.philly or None, args.out)}")


if __name__ == "__main__":
    main()
