"""One engine case, reduced if asked, with a named profile: the decision cost of a profile.

``python -m bench.decision_cost --case multi-replica-1k --profile binpack --jobs 2000``

Prints one JSON line: placements, replicas, decisions, CPU and wall seconds of
``schedule()``, placements per CPU-second. Meant to be run many times, interleaved with a
second tree or profile (each run its own process), with no time budget (the cycles run
are always the case's), and under
``valgrind --tool=callgrind``, whose instruction counts the load of a shared machine cannot
move. With ``--callgrind`` the run switches callgrind's instrumentation on for each
``schedule()`` call and off after it (``vgdb ... instrumentation on|off``), so under

    valgrind --tool=callgrind --instr-atstart=no python -m bench.decision_cost --callgrind ...

the instructions callgrind reports are those of ``schedule()`` alone (building the fleet and
the backlog, and the harness between cycles, run uninstrumented and about ten times faster).

The case runs on whatever ``flotilla`` is first on ``sys.path``, so the same command measures
another commit's engine: ``PYTHONPATH=/tmp/other/src:. python -m bench.decision_cost ...``
(``--profile`` omitted means that tree's default profile).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
from dataclasses import replace

from bench.cases import ENGINE_CASES
from bench.engine import run_engine_case
from bench.profile import _wrap
from flotilla.scheduler import SchedulingConfig


def _instrumentation(state: str) -> None:
    """Ask the callgrind running this process to switch its instrumentation ``on``/``off``.

    The request is served while this process runs guest code, so it spins (rather than
    blocking in ``wait``) until ``vgdb`` reports it done."""
    vgdb = shutil.which("vgdb")
    if vgdb is None:
        raise SystemExit("--callgrind needs valgrind's vgdb on PATH")
    command = [vgdb, f"--pid={os.getpid()}", "instrumentation", state]
    done = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while done.poll() is None:
        pass
    if done.returncode != 0:
        raise SystemExit(f"vgdb failed ({done.returncode}): run under valgrind --tool=callgrind")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.decision_cost")
    parser.add_argument("--case", required=True, choices=sorted(ENGINE_CASES))
    parser.add_argument("--profile", help="scheduling profile (default: the tree's default)")
    parser.add_argument("--jobs", type=int, help="override the case's backlog size")
    parser.add_argument("--cycles", type=int, help="override the case's number of cycles")
    parser.add_argument(
        "--prefill",
        type=float,
        help="fill the fleet to this share first, outside schedule() (e.g. 0.9)",
    )
    parser.add_argument(
        "--usage-half-life",
        type=float,
        help="order by usage decayed with this half-life, seconds (settings.usage_half_life)",
    )
    parser.add_argument(
        "--owners",
        type=int,
        help="jobs owned by N users in turn, every queue shared among them by DRF with a "
        "per-owner running-job limit (queues[].owners)",
    )
    parser.add_argument(
        "--owner-overrides",
        action="store_true",
        help="with --owners: one owner has its own limit (owners.limits)",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="under callgrind --instr-atstart=no: instrument schedule() only",
    )
    arguments = parser.parse_args()
    # No time budget: the work done must not depend on how fast this machine is now (under
    # callgrind or a loaded machine, the case's budget would cut cycles off).
    case = replace(ENGINE_CASES[arguments.case], budget_s=math.inf)
    if arguments.profile is not None:
        case = replace(case, config=SchedulingConfig(profile=arguments.profile))
    if arguments.usage_half_life is not None:
        case = replace(case, config=replace(case.config, usage_half_life=arguments.usage_half_life))
    if arguments.jobs is not None:
        case = replace(case, workload=replace(case.workload, jobs=arguments.jobs))
    if arguments.cycles is not None:
        case = replace(case, cycles=arguments.cycles)
    if arguments.owners:
        case = replace(
            case,
            workload=replace(
                case.workload,
                owners=arguments.owners,
                owner_overrides=arguments.owner_overrides,
            ),
        )
    if arguments.prefill is not None:
        case = replace(case, prefill=arguments.prefill)
    if arguments.callgrind:
        # Count only schedule(): instrumentation on at its start, off at its end.
        _wrap(lambda: _instrumentation("on"), lambda: _instrumentation("off"))
    result = run_engine_case(case, measure_memory=False)
    print(
        json.dumps(
            {
                "case": arguments.case,
                "profile": case.config.profile,
                "usage_half_life": case.config.usage_half_life,
                "owners": case.workload.owners,
                "owner_overrides": case.workload.owner_overrides,
                "jobs": case.workload.jobs,
                "cycles": result["cycle_count"],
                "placements": result["placements"],
                "replicas": result["replicas_placed"],
                "decisions": result["decisions"],
                "engine_cpu_s": round(result["engine_cpu_s"], 4),
                "engine_s": round(result["engine_s"], 4),
                "placements_per_cpu_s": round(result["placements_per_cpu_s"], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
