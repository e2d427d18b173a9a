"""``flotilla simulate --format html``: what the page draws, and that it opens offline."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from playwright.sync_api import Page, expect
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


# Six 0.5-cpu jobs at once on one 4-cpu node: six lanes in one row.
CROWDED = scenario(
    name="crowded",
    clusters=[cluster("c1", nodes(1, cpu=4))],
    queues=["q"],
    jobs=[job("together", count=6, cpu=0.5, duration=100, submit_at=0)],
    settings={"cycle_interval": 10},
)


def report_page(browser: Any, data: Data, tmp_path: Path) -> Page:
    """The simulation report of ``data``, opened offline."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    page_file = tmp_path / "report.html"
    result = CliRunner().invoke(
        app, ["simulate", str(path), "--format", "html", "-o", str(page_file)]
    )
    assert result.exit_code == 0, result.output
    page: Page = browser.new_context(
        offline=True, viewport={"width": 1280, "height": 800}
    ).new_page()
    page.goto(page_file.as_uri())
    expect(page.locator("#gantt rect.bar").first).to_be_attached()
    return page


def test_runs_at_once_on_one_node_are_drawn_apart(browser: Any, tmp_path: Path) -> None:
    """Jobs sharing a node were drawn over each other: the Gantt showed one bar for six."""
    page = report_page(browser, CROWDED, tmp_path)
    spans = page.locator("#gantt rect.bar").evaluate_all(
        """bars => bars.map(bar => [Number(bar.getAttribute("y")),
             Number(bar.getAttribute("y")) + Number(bar.getAttribute("height"))])"""
    )
    assert len(spans) == 6
    spans.sort()
    apart = all(upper[1] <= lower[0] for upper, lower in pairwise(spans))
    assert apart, f"bars overlap: {spans}"
    assert all(bottom - top > 0 for top, bottom in spans), spans


def test_no_queue_takes_the_preemption_markers_colour(browser: Any, tmp_path: Path) -> None:
    """The sixth queue's bars and lines were the vermillion of the marks of a preemption
    (the Gantt's ▼, the line charts' marker lines)."""
    page = report_page(browser, PREEMPTION, tmp_path)
    # The report's own chart code and style sheet draw a Gantt of 16 queues, each with a
    # preempted run, and a line chart of 16 series with a preemption marked.
    drawn = page.evaluate(
        """() => {
          const Charts = window.FlotillaCharts;
          const groups = Array.from({length: 16}, (_, i) => "q" + i);
          const gantt = document.body.appendChild(document.createElement("div"));
          Charts.gantt(gantt, {rows: ["n"], groups, xEnd: 20, bars: groups.map((g, i) =>
            ({row: "n", start: i, end: i + 1, label: "j" + i, group: g, preempted: true}))});
          const lines = document.body.appendChild(document.createElement("div"));
          Charts.lineChart(lines, {series: groups.map((g) => ({name: g,
            points: [[0, 1], [5, 2]]})), markers: [{x: 2, label: "preempted"}]});
          const paint = (node, property) => getComputedStyle(node)[property];
          const all = (root, selector) => [...root.querySelectorAll(selector)];
          return {
            queues: all(gantt, "rect.bar").map((bar) => paint(bar, "fill"))
              .concat(all(lines, "path.series").map((line) => paint(line, "stroke"))),
            markers: all(gantt, "path.preemption").map((mark) => paint(mark, "fill"))
              .concat(all(lines, "line.marker").map((mark) => paint(mark, "stroke")))
              .concat(all(document, "#gantt path.preemption").map((m) => paint(m, "fill"))),
          };
        }"""
    )
    assert len(drawn["queues"]) == 32 and len(drawn["markers"]) == 18, drawn
    clashes = set(drawn["queues"]) & set(drawn["markers"])
    assert not clashes, f"a queue drawn in the preemption marker's colour: {clashes}"
