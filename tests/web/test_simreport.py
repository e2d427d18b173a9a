"""``flotilla simulate --format html``: what the page draws, and that it opens offline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from playwright.sync_api import expect
from typer.testing import CliRunner

from flotilla.cli.main import app
from flotilla.model.loader import load_scenario
from flotilla.sim.report import build_report
from flotilla.sim.simulator import SimulationOptions, simulate
from flotilla.web.simreport import simulation_pictures
from tests.builders import REPO_ROOT, Data, cluster, job, nodes, scenario
from tests.web.conftest import screenshot

# One 4-cpu node; `small` (queue b) runs first, `big` (queue a) needs the whole node after it.
TWO_QUEUES = scenario(
    name="two-queues </script><!-- <b>",
    clusters=[cluster("c1", nodes(1, cpu=4, memory="8Gi"))],
    queues=["a", "b"],
    jobs=[
        job("big", queue="a", cpu=4, memory="1Gi", duration=100, submit_at=0),
        job("small", queue="b", cpu=2, memory="1Gi", duration=50, submit_at=0),
    ],
    settings={"cycle_interval": 10},
)

# A low-priority job fills the node; a high-priority one arrives and preempts it.
PREEMPTION = scenario(
    name="preemption",
    clusters=[cluster("c1", nodes(1, cpu=4))],
    queues=[{"name": "q", "preemption": {"within_queue": "lower_priority"}}],
    jobs=[
        job("low", cpu=4, duration=300, submit_at=0, priority=0),
        job("urgent", cpu=4, duration=60, submit_at=30, priority=10),
    ],
    settings={"cycle_interval": 10},
)


def pictures_of(data: Data, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    sim = simulate(load_scenario(path), SimulationOptions())
    return simulation_pictures(sim, build_report(sim))


def test_utilisation_shares_waits_and_gantt_follow_the_event_log(tmp_path: Path) -> None:
    pictures = pictures_of(TWO_QUEUES, tmp_path)
    assert pictures["end_time"] == 150
    assert pictures["utilisation"]["c1"]["cpu"] == [[0, 0.5], [50, 1.0], [150, 0.0]]
    assert pictures["shares"]["b"] == [[0, 0.5], [50, 0.0]]
    # Both queues want resources at first: half each; then only a does.
    assert pictures["fair"]["a"] == [[0, 0.5], [50, 1.0], [150, 0.0]]
    assert pictures["waits"] == {"a": [50.0], "b": [0.0]}
    bars = [
        (bar["label"], bar["row"], bar["start"], bar["end"]) for bar in pictures["gantt"]["bars"]
    ]
    assert bars == [("small", "c1/n-0", 0, 50), ("big", "c1/n-0", 50, 150)]
    assert pictures["preemptions"] == []


def test_preemptions_are_marked(tmp_path: Path) -> None:
    pictures = pictures_of(PREEMPTION, tmp_path)
    assert [(p["job"], p["time"]) for p in pictures["preemptions"]] == [("low", 30)]
    preempted = [bar for bar in pictures["gantt"]["bars"] if bar["preempted"]]
    assert [(bar["label"], bar["start"], bar["end"]) for bar in preempted] == [("low", 0, 30)]


def test_html_needs_an_output_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(TWO_QUEUES))
    result = CliRunner().invoke(app, ["simulate", str(path), "--format", "html"])
    assert result.exit_code == 2
    assert "-o FILE" in result.output


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(TWO_QUEUES))
    page = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["simulate", str(path), "--format", "html", "-o", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text), "nothing is loaded"
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text)
    assert data is not None
    assert json.loads(data.group(1))["scenario"] == TWO_QUEUES["name"]
    assert "<b>" not in text  # the name is escaped in the title and in the data


def test_the_quickstart_report_opens_offline_with_data_in_every_chart(
    browser: Any, tmp_path: Path
) -> None:
    page_file = tmp_path / "r.html"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            str(REPO_ROOT / "examples" / "quickstart.yaml"),
            "--format",
            "html",
            "-o",
            str(page_file),
        ],
    )
    assert result.exit_code == 0, result.output
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 800})
    requests: list[str] = []
    context.on("request", lambda request: requests.append(request.url))
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_file.as_uri())
    for chart in ("utilisation", "shares"):
        series = page.locator(f"#{chart} path.series")
        expect(series.first).to_be_attached()
        counts = [int(n) for n in series.evaluate_all("s => s.map(p => p.dataset.points)")]
        assert max(counts) > 2, f"{chart}: a line with too few points: {counts}"
    expect(page.locator("#waits g.box")).to_have_count(3)  # research, product, vision
    assert page.locator("#gantt rect.bar").count() > 50
    assert errors == []
    assert [url for url in requests if not url.startswith("file:")] == []
    screenshot(page, "simulation-report")
