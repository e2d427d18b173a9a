"""The benchmark harness runs a tiny case end to end and writes well-formed results.

No timing assertions: figures are printed by the harness, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cases import CASES, ENGINE_CASES, quick_suite  # noqa: E402
from bench.engine import run_engine_case  # noqa: E402
from bench.generators import FleetParams, WorkloadParams, build_fleet, build_workload  # noqa: E402
from bench.philly import build_scenario, read_trace, run_philly, scenario_data  # noqa: E402
from tests.timing import limit  # noqa: E402

from flotilla.model import scenario_from_data  # noqa: E402
from flotilla.sim import Simulator  # noqa: E402
from flotilla.sim.report import build_report  # noqa: E402


def test_tiny_engine_case_produces_figures() -> None:
    result = run_engine_case(ENGINE_CASES["tiny"])
    assert result["kind"] == "engine"
    assert result["cycle_count"] >= 1
    assert result["placements"] > 0
    assert result["decisions"] >= result["placements"]
    assert result["bytes_per_queued_job"] > 0
    assert result["peak_rss_bytes"] > 0
    for key in ("placements_per_s", "decisions_per_s", "cycle_p50_s", "cycle_p99_s"):
        assert result[key] >= 0
    json.dumps(result)


def test_generators_follow_parameters() -> None:
    fleet = build_fleet(FleetParams(nodes=30, clusters=3))
    assert fleet.nodes == 30 and len(fleet.clusters) == 3
    workload = build_workload(WorkloadParams(jobs=50, queues=5, quota_tree=True), fleet)
    assert len(workload.jobs) == 50
    assert {job.queue for job in workload.jobs} == {q.name for q in workload.queues}
    assert set(workload.queue_quota) == {q.name for q in workload.queues}
    assert workload.quotas[0].name == "org"


def test_philly_conversion_builds_a_valid_scenario(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,aa\n"
        "2017-10-09 07:00:00,100.0,16,1600.0,bb\n"
        "2017-10-09 07:03:00,10.0,12,120.0,aa\n"
    )
    rows = read_trace(trace)
    scenario = scenario_from_data(scenario_data(rows, nodes=4))
    assert [job.submit_at for job in scenario.jobs] == [0, 115, 180]
    assert scenario.jobs[0].tasks[0].replicas == 2  # 16 GPUs = 2 × 8
    assert scenario.jobs[2].tasks[0].replicas == 3  # 12 GPUs = 3 × 4
    result = run_philly(nodes=4, path=trace)
    assert result["states"] == {"succeeded": 3}
    json.dumps(result)


def test_philly_templated_scenario_equals_the_validated_one() -> None:
    rows = [
        {"submit": 100.0 + 7 * index, "duration": 30.0 + index, "gpus": gpus, "vc": vc}
        for index, (gpus, vc) in enumerate(
            [(1, "a"), (8, "b"), (1, "a"), (16, "a"), (12, "b"), (1, "b"), (16, "a"), (8, "b")]
        )
    ]
    fast = build_scenario(rows, nodes=4)
    slow = scenario_from_data(scenario_data(rows, nodes=4))
    assert fast == slow
    assert [job.model_fields_set for job in fast.jobs] == [
        job.model_fields_set for job in slow.jobs
    ]
    # Copies share their template's tasks, so the simulator builds one shape per template.
    assert fast.jobs[2].tasks is fast.jobs[0].tasks
    fast_report = build_report(Simulator(fast).run())
    slow_report = build_report(Simulator(slow).run())
    del fast_report["summary"]["wall_seconds"], slow_report["summary"]["wall_seconds"]
    assert json.dumps(fast_report, sort_keys=True) == json.dumps(slow_report, sort_keys=True)


def test_cli_runs_a_case_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--case", "tiny", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit(300),
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(out.read_text())
    assert payload["machine"]["cores"] >= 1
    assert payload["machine"]["numpy"]
    [result] = payload["results"]
    assert result["case"] == "tiny"
    assert result["command"].endswith("--case tiny")
    assert "tiny" in proc.stdout


def test_suites_name_known_cases() -> None:
    assert set(quick_suite()) <= set(CASES)
    assert "headline-5k" in quick_suite()


def test_gpu_fill_reports_each_profile_and_allocation_only_grows() -> None:
    from bench.gpu_fill import PROFILES, render, run_fill

    result = run_fill(nodes=40, seeds=(1,))
    rows = result["rows"]
    assert [row["profile"] for row in rows] == list(PROFILES)
    for row in rows:
        # Nothing finishes, so the share allocated at 90 % demand is at most the final one.
        assert 0.0 < row["at_90"] <= row["end"] <= 1.0
        assert 0 < row["placed"] <= row["pods"]
        assert 0.0 <= row["unallocated_end"] <= row["unallocated_first_failure"]
        assert row["decision_us"] > 0
    shown = render(result)
    assert "gpu-packing" in shown and "| fgd |" in shown


def test_decision_cost_runs_a_case_with_the_profile_named_and_every_cycle() -> None:
    command = [sys.executable, "-m", "bench.decision_cost", "--case", "tiny", "--cycles", "2"]
    for profile in ("binpack", "gpu-packing"):
        done = subprocess.run(
            [*command, "--profile", profile], cwd=ROOT, capture_output=True, text=True, check=True
        )
        figures = json.loads(done.stdout)
        assert figures["profile"] == profile
        assert figures["cycles"] == 2
        assert figures["placements"] > 0 and figures["placements_per_cpu_s"] > 0


def test_decision_cost_with_owners_gives_every_queue_owners_and_their_limits() -> None:
    """``--owners`` (issue 28): the case's queues shared among owners, with a per-owner
    running-job limit that holds some jobs, and one owner's own limit with
    ``--owner-overrides``."""
    command = [sys.executable, "-m", "bench.decision_cost", "--case", "tiny", "--cycles", "1"]
    placed = {}
    for extra in ([], ["--owners", "2"], ["--owners", "2", "--owner-overrides"]):
        done = subprocess.run(
            [*command, *extra], cwd=ROOT, capture_output=True, text=True, check=True
        )
        figures = json.loads(done.stdout)
        placed[len(extra)] = figures["placements"]
    assert figures["owners"] == 2 and figures["owner_overrides"] is True
    assert 0 < placed[2] < placed[0]  # the per-owner limit holds some jobs
    assert placed[2] < placed[3]  # u1's own limit lets more of hers run


def test_decision_cost_with_callgrind_outside_valgrind_fails_with_a_clear_message() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.decision_cost", "--case", "tiny", "--callgrind"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "callgrind" in done.stderr


def test_the_openb_shaped_trace_has_the_public_traces_shape() -> None:
    """8,152 pods on 1,523 nodes with 6,212 GPUs, 24 GPU amounts of which 20 fractional, and
    GPU demand about the fleet's (bench/openb_shape.py)."""
    from bench import openb_shape

    pods = openb_shape.trace(1)
    assert len(pods) == 8_152
    assert sum(count for *_, count in openb_shape.NODES) == 1_523
    gpus = sum(gpus * count for *_, gpus, count in openb_shape.NODES)
    assert gpus == 6_212
    assert openb_shape.gpu_amounts(pods) == (24, 20)
    assert 0.95 * gpus <= sum(pod.gpu for pod in pods) <= 1.1 * gpus
    assert len({(pod.gpu, pod.cpu, pod.memory) for pod in pods}) >= 100  # joint task types
