"""The dashboard's charts in a real browser over a real ``flotilla up``: what they draw must
not mislead (jobs hidden under each other, a quarter of a job). The colours and the thin
lanes of a busy node are checked on the simulation report (``test_simreport.py``), which
draws with the same chart code and style sheet."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Locator, Page, expect

from tests.e2e.service import Server, job_spec
from tests.web.conftest import ANA_TOKEN, screenshot
from tests.web.test_dashboard_browser import LIVE, signed_in


def bar_of(page: Page, job_name: str) -> Locator:
    """A job's bar on the clusters page's Gantt (its hover title names it)."""
    return page.locator("svg.chart rect.bar", has=page.locator("title", has_text=f"{job_name} ("))


def test_jobs_running_together_on_one_node_get_lanes_of_their_own(
    browser: Any, server: Server
) -> None:
    """Two runs at once on the one local node were drawn at the same height, one hiding
    the other."""
    ids = server.submit(job_spec("lane-a", ["sleep", "120"]), job_spec("lane-b", ["sleep", "120"]))
    server.wait_states(ids, frozenset({"running"}), limit=LIVE / 1000)
    page = signed_in(browser, server, ANA_TOKEN)
    page.get_by_role("link", name="Clusters").click()
    first, second = bar_of(page, "lane-a"), bar_of(page, "lane-b")
    expect(first).to_be_attached(timeout=LIVE)
    expect(second).to_be_attached(timeout=LIVE)
    # Both bars are in one drawing (it is redrawn every 3 s): read them in one evaluation.
    spans = page.evaluate(
        """() => [...document.querySelectorAll("svg.chart rect.bar")].map((bar) => {
             const y = Number(bar.getAttribute("y"));
             const title = bar.querySelector("title").textContent;  // "job (queue) on row: …"
             return [title, title.split(" on ")[1].split(": ")[0], y,
               y + Number(bar.getAttribute("height"))];
           })"""
    )
    [a] = [span for span in spans if span[0].startswith("lane-a (")]
    [b] = [span for span in spans if span[0].startswith("lane-b (")]
    assert a[1] == b[1], f"not on one node: {a[1]} and {b[1]}"
    assert a[3] <= b[2] or b[3] <= a[2], f"the bars overlap: {a[2:]} and {b[2:]}"
    screenshot(page, "clusters-lanes")


INTEGER = re.compile(r"^-?\d+$")


def y_tick_labels(page: Page, chart_label: str) -> list[str]:
    """The y axis's tick labels of the chart with that aria-label (anchored at their end,
    left of the plot; the x axis's are centred under it)."""
    chart = page.locator(f"svg.chart[aria-label='{chart_label}']")
    expect(chart.locator("path.series").first).to_be_attached(timeout=LIVE)  # samples drawn
    labels: list[str] = chart.locator("g.axis text[text-anchor='end']").all_text_contents()
    assert labels, f"no y tick on {chart_label}"
    return labels


def test_count_axes_have_integer_ticks_only(browser: Any, server: Server) -> None:
    """One running job drew ticks at 0.25, 0.5 and 0.75 jobs."""
    ids = server.submit(job_spec("counted", ["sleep", "120"]))
    server.wait_states(ids, frozenset({"running"}), limit=LIVE / 1000)
    page = signed_in(browser, server, ANA_TOKEN)
    page.get_by_role("link", name="Queues").click()
    jobs = y_tick_labels(page, "jobs per queue over time")
    assert all(INTEGER.match(label) for label in jobs), f"jobs per queue: {jobs}"
    page.get_by_role("link", name="Scheduler").click()
    decisions = y_tick_labels(page, "decisions over time")
    assert all(INTEGER.match(label) for label in decisions), f"decisions: {decisions}"
