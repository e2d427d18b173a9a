"""Markdown tables from results files: ``python -m bench.markdown bench/results/X.json …``.

Used to paste measured figures into docs/performance.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MIB = 2**20


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def engine_rows(results: list[dict[str, Any]]) -> str:
    lines = [
        "| case | nodes | queued | cycles | placed | placements/s (wall) | placements/CPU-s "
        "| µs/placement (wall) | decisions/s (wall) | µs/decision (wall) | µs/decision (CPU) "
        "| cycle p50 ms "
        "| cycle p99 ms | CPU share | peak RSS MiB | B/queued job |",
        "|---|" + "---:|" * 15,
    ]
    for r in results:
        if r.get("kind") != "engine":
            continue
        lines.append(
            f"| {r['case']} | {_f(r['params']['nodes'])} | {_f(r['params']['jobs'])} "
            f"| {r['cycle_count']} | {_f(r['placements'])} | {_f(r['placements_per_s'])} "
            f"| {_f(r['placements_per_cpu_s'])} | {_f(r['us_per_placement'], 1)} "
            f"| {_f(r['decisions_per_s'])} | {_f(r['us_per_decision'], 2)} "
            f"| {_f(r['engine_cpu_s'] / r['decisions'] * 1e6 if r['decisions'] else None, 2)} "
            f"| {_f(r['cycle_p50_s'] * 1e3, 1)} | {_f(r['cycle_p99_s'] * 1e3, 1)} "
            f"| {_f((r['cpu_share'] or 0) * 100)}% | {_f(r['peak_rss_bytes'] / MIB)} "
            f"| {_f(r.get('bytes_per_queued_job'))} |"
        )
    return "\n".join(lines)


def cycle_rows(results: list[dict[str, Any]]) -> str:
    lines = [
        "| case | cycle | queued before | running before | considered | scheduled | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for c in r.get("cycles", []):
            lines.append(
                f"| {r['case']} | {c['cycle']} | {_f(c['queued_before'])} "
                f"| {_f(c['running_before'])} | {_f(c['considered'])} | {_f(c['scheduled'])} "
                f"| {c['seconds']:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    results: list[dict[str, Any]] = []
    for name in sys.argv[1:]:
        payload = json.loads(Path(name).read_text())
        results += payload["results"]
        print(f"<!-- {name}: {payload['command']} on {payload['machine']['cpu_model']} -->")
    print(engine_rows(results))
    print()
    print(cycle_rows(results))
    for r in results:
        if r.get("kind") == "simulator":
            keep = {k: v for k, v in r.items() if k not in ("description",)}
            print()
            print(json.dumps(keep, indent=1, default=str))


if __name__ == "__main__":
    main()
