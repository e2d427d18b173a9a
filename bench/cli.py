"""``python -m bench``: run benchmark cases, print tables, write a JSON results file.

Each case runs in its own process (``--worker``), so peak RSS is the case's own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.cases import CASES, full_suite, quick_suite
from bench.machine import machine_info
from bench.report import render

RESULTS = Path(__file__).resolve().parent / "results"


def run_case(name: str) -> dict[str, Any]:
    case = CASES[name]
    load = os.getloadavg()
    result = case.run()
    result["load_average_before"] = list(load)
    result["load_average_after"] = list(os.getloadavg())
    result["case"] = name
    result["target"] = case.target
    result["command"] = f"python3 -m uv run python -m bench --case {name}"
    return result


def run_isolated(name: str, timeout: float) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = Path(handle.name)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "--worker", name, "--out", str(out)],
            cwd=Path(__file__).resolve().parent.parent,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return {"kind": "error", "case": name, "error": proc.stderr.strip()[-2000:]}
        loaded: dict[str, Any] = json.loads(out.read_text())
        return loaded
    except subprocess.TimeoutExpired:
        elapsed = time.perf_counter() - started
        return {"kind": "error", "case": name, "error": f"timed out after {elapsed:.0f}s"}
    finally:
        out.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--case", action="append", default=[], help="run this case (repeatable)")
    parser.add_argument("--full", action="store_true", help="every case, including the big ones")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--out", type=Path, help="results JSON (default bench/results/<time>.json)")
    parser.add_argument("--in-process", action="store_true", help="run cases in this process")
    parser.add_argument("--timeout", type=float, default=900, help="per-case limit, seconds")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        args.out.write_text(json.dumps(run_case(args.worker), default=str))
        return 0
    console = Console() if sys.stdout.isatty() else Console(width=200)
    if args.list:
        for name, case in CASES.items():
            suite = "quick" if case.quick else "full"
            console.print(f"[bold]{name}[/bold] ({suite}) {case.description}")
        return 0
    unknown = [name for name in args.case if name not in CASES]
    if unknown:
        console.print(f"unknown case(s): {', '.join(unknown)}; see --list")
        return 2
    names = args.case or (full_suite() if args.full else quick_suite())
    machine = machine_info()
    results = []
    for name in names:
        console.print(f"[dim]running {name} …[/dim]")
        started = time.perf_counter()
        result = run_case(name) if args.in_process else run_isolated(name, args.timeout)
        console.print(f"[dim]  {name} done in {time.perf_counter() - started:.1f}s[/dim]")
        results.append(result)
    render(results, machine, console)
    out = args.out or RESULTS / time.strftime("%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = "python3 -m uv run python -m bench " + " ".join(
        (["--full"] if args.full else []) + [f"--case {n}" for n in args.case]
    )
    payload = {"machine": machine, "command": command.strip(), "results": results}
    out.write_text(json.dumps(payload, indent=1, default=str))
    console.print(f"results written to {out}")
    return 1 if any(r.get("kind") == "error" for r in results) else 0
