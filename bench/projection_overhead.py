"""Does the projection slow scheduling? ``service-cancel`` (a running job's cancel during
long async rounds, ``bench/service.py``) with the projection off (``--projection-interval 0``)
and on (``--projection-interval 5``: twelve times as often as the default), alternately,
``pairs`` times. The backlog is smaller than the case's 70,000 so that a pair fits a loaded
2-core machine; every projection then exports and simulates the whole backlog (under the
20,000 waiting jobs a projection takes)."""

from __future__ import annotations

import json
from typing import Any

from bench.service import run_cancel_latency

VARIANTS = {"off": ("--projection-interval", "0"), "on": ("--projection-interval", "5")}


def run_projection_overhead(
    backlog: int = 10_000, cancellable: int = 40, pairs: int = 1
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for pair in range(pairs):
        for name, flags in VARIANTS.items():
            result = run_cancel_latency(
                backlog=backlog, cancellable=cancellable, queued_cancels=10, up_flags=flags
            )
            runs.append(
                {
                    "pair": pair,
                    "projection": name,
                    "cancel_running": result["cancel_running"],
                    "cancel_queued": result["cancel_queued"],
                    "submit_jobs_per_s": result["submit_jobs_per_s"],
                    "algorithm_run_min_s": result["algorithm_run_min_s"],
                    "algorithm_runs_s": result["algorithm_runs_s"],
                }
            )
    return {
        "kind": "projection-overhead",
        "params": {"backlog": backlog, "cancellable": cancellable, "pairs": pairs},
        "runs": runs,
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--cancellable", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(run_projection_overhead(args.backlog, args.cancellable, args.pairs), indent=2))
