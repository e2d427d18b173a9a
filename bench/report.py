"""Readable tables of benchmark results (rich)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.cancel_trace import trace_lines
from bench.get_under_submit import get_under_submit_lines
from bench.soak import soak_lines

MIB = 2**20


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:,.1f}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:,.0f}"


def _table(title: str, columns: Sequence[str]) -> Table:
    """A table whose text columns (case, target) are left-aligned and figures right-aligned."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="left" if column in ("case", "target") else "right")
    return table


def engine_table(results: Sequence[dict[str, Any]]) -> Table:
    table = _table(
        "Engine cases (SchedulingAlgorithm.schedule, repeated cycles)",
        (
            "case",
            "nodes",
            "queued",
            "cycles",
            "placed",
            "placements/s",
            "per CPU-s",
            "µs/placement",
            "decisions/s",
            "µs/decision",
            "cycle p50 ms",
            "cycle p99 ms",
            "peak RSS MiB",
            "B/queued job",
            "target",
        ),
    )
    for r in results:
        if r.get("kind") != "engine":
            continue
        table.add_row(
            r["case"],
            _num(r["params"]["nodes"]),
            _num(r["params"]["jobs"]),
            str(r["cycle_count"]),
            _num(r["placements"]),
            _num(r["placements_per_s"]),
            _num(r["placements_per_cpu_s"]),
            _num(r["us_per_placement"], 1),
            _num(r["decisions_per_s"]),
            _num(r["us_per_decision"], 1),
            _ms(r["cycle_p50_s"]),
            _ms(r["cycle_p99_s"]),
            _mib(r["peak_rss_bytes"]),
            _num(r.get("bytes_per_queued_job")),
            r.get("target", ""),
        )
    return table


def simulator_table(results: Sequence[dict[str, Any]]) -> Table:
    table = _table(
        "Simulator cases (trace replay, end to end)",
        (
            "case",
            "jobs",
            "GPUs",
            "end to end s",
            "simulate s",
            "engine s",
            "cycles run",
            "decisions/s",
            "cycle p50 ms",
            "cycle p99 ms",
            "peak RSS MiB",
            "mean wait s",
            "target",
        ),
    )
    for r in results:
        if r.get("kind") != "simulator":
            continue
        table.add_row(
            r["case"],
            _num(r["params"]["jobs"]),
            _num(r["params"]["gpus"]),
            _num(r["end_to_end_s"], 1),
            _num(r["simulate_s"], 1),
            _num(r["engine_s"], 1),
            _num(r["executed_cycles"]),
            _num(r["decisions_per_s"]),
            _ms(r["cycle_p50_s"]),
            _ms(r["cycle_p99_s"]),
            _mib(r["peak_rss_bytes"]),
            _num(r["mean_wait_s"]),
            r.get("target", ""),
        )
    return table


def scaling_table(results: Sequence[dict[str, Any]]) -> Table:
    table = _table(
        "Scaling (growth with nodes and with queued jobs)",
        (
            "case",
            "nodes",
            "queued",
            "µs/placement",
            "µs/decision",
            "first cycle ms",
            "B/queued job",
            "RSS Δ/job B",
        ),
    )
    for r in results:
        if r.get("kind") != "engine" or not set(r["tags"]) & {"scale-nodes", "scale-jobs"}:
            continue
        table.add_row(
            r["case"],
            _num(r["params"]["nodes"]),
            _num(r["params"]["jobs"]),
            _num(r["us_per_placement"], 1),
            _num(r["us_per_decision"], 2),
            _ms(r["cycles"][0]["seconds"] if r["cycles"] else None),
            _num(r.get("bytes_per_queued_job")),
            _num(r.get("rss_bytes_per_job")),
        )
    return table


def render(results: Sequence[dict[str, Any]], machine: dict[str, Any], console: Console) -> None:
    console.print(
        f"[bold]Machine[/bold]: {machine['cpu_model']}, {machine['cores']} cores, "
        f"{machine['memory_bytes'] / 2**30:.0f} GiB; Python {machine['python']}, "
        f"numpy {machine['numpy']}; commit {machine['commit']}; "
        f"load average at start {machine['load_average_1_5_15'][0]:.2f}"
    )
    if any(r.get("kind") == "engine" for r in results):
        console.print(engine_table(results))
    if any(
        r.get("kind") == "engine" and set(r["tags"]) & {"scale-nodes", "scale-jobs"}
        for r in results
    ):
        console.print(scaling_table(results))
    if any(r.get("kind") == "simulator" for r in results):
        console.print(simulator_table(results))
    for line in service_lines(results):
        console.print(line)
    for r in results:
        if r.get("kind") == "gpu-fill":
            from bench.gpu_fill import render as render_fill

            console.print(f"{r['case']}: GPU allocation ratio per profile")
            console.print(render_fill(r), markup=False)
    failed = [r for r in results if r.get("kind") == "error"]
    for r in failed:
        console.print(f"[red]{r['case']} failed[/red]: {r['error']}")
    console.print(
        "Peak RSS: getrusage ru_maxrss of the case's own process (one process per case). "
        "B/queued job: tracemalloc over 10,000 jobs built with build_job. "
        "Only schedule() is timed; µs/placement counts cycles that placed something."
    )
    console.print("Reproduce one case: python3 -m uv run python -m bench --case NAME")


def service_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """Figures of the through-the-service cases, one line each."""
    lines = []
    for r in results:
        if r.get("kind") == "service":
            running, queued = r["cancel_running"], r["cancel_queued"]
            lines.append(
                f"{r['case']}: cancel of a running job (request → 'cancelled' visible) "
                f"p50 {running['p50_ms']:.0f} ms, p99 {running['p99_ms']:.0f} ms, max "
                f"{running['max_ms']:.0f} ms over {running['count']} "
                f"({r['cancels_issued_during_a_run']} issued during a run); queued job p50 "
                f"{queued['p50_ms']:.0f} ms, p99 {queued['p99_ms']:.0f} ms; algorithm runs "
                f"{', '.join(f'{s:.1f}' for s in r['algorithm_runs_s'])} s; submit "
                f"{r['submit_jobs_per_s']:,.0f} jobs/s; target {r.get('target', '')}"
            )
            lines.extend(trace_lines(r))
        elif r.get("kind") == "soak":
            lines.extend(soak_lines(r))
        elif r.get("kind") == "get-under-submit":
            lines.extend(get_under_submit_lines(r))
        elif r.get("kind") == "service-throughput":
            lines.append(
                f"{r['case']}: submit {r['submit_jobs_per_s']:,.0f} jobs/s; submit → scheduled "
                f"{r['submit_to_scheduled_jobs_per_s']:,.0f} jobs/s "
                f"({r['params']['jobs']:,} jobs in {r['submit_to_scheduled_seconds']:.1f} s); "
                f"target {r.get('target', '')}"
            )
        elif r.get("kind") == "service-wake":
            heard, params = r["submit_to_leased"], r["params"]
            lines.append(
                f"{r['case']}: submit → not queued p50 {heard['p50_ms']:.0f} ms, p99 "
                f"{heard['p99_ms']:.0f} ms, mean {heard['mean_ms']:.0f} ms over {heard['count']} "
                f"jobs, cycles {params['cycle_interval_s']:g} s apart; target {r.get('target', '')}"
            )
    return lines
