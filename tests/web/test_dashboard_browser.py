"""The dashboard in a real browser over a real ``flotilla up``: what a person would check."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import httpx
import yaml
from playwright.sync_api import Page, expect

from tests.e2e.service import Server, Services, job_spec, wait_for
from tests.web.conftest import ANA_TOKEN, TOKENS, VIEWER_TOKEN, screenshot

LIVE = 30_000
"""Milliseconds a live update may take on a loaded 2-core box."""
HELD = {"hold_if_unfit": True}
"""Keeps a job no node can hold queued (the server refuses it otherwise): one that waits."""


def signed_in(browser: Any, server: Server, token: str, **context: Any) -> Page:
    options = {"viewport": {"width": 1280, "height": 800}, **context}
    page: Page = browser.new_context(**options).new_page()
    page.goto(f"{server.url}/ui")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    return page


def test_a_job_appears_runs_and_finishes_live_with_its_logs(browser: Any, server: Server) -> None:
    page = signed_in(browser, server, ANA_TOKEN)
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    script = "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.5; done"
    [job_id] = server.submit(job_spec("printer", ["sh", "-c", script]))
    row = page.locator(f"tr[data-job='{job_id}']")
    expect(row).to_be_visible(timeout=LIVE)  # appears without a reload
    expect(row).to_have_attribute("data-state", "running", timeout=LIVE)
    screenshot(page, "jobs")
    row.get_by_role("link", name="printer").click()
    expect(page.get_by_role("heading", name="printer")).to_be_visible()
    logs = page.locator("pre.logs")
    expect(logs).to_contain_text("line-1", timeout=LIVE)
    expect(logs).to_contain_text("line-6", timeout=LIVE)  # streamed as the job writes
    expect(page.locator(".job-head .badge")).to_have_text("succeeded", timeout=LIVE)
    expect(page.locator("ol.events")).to_contain_text("running")
    expect(page.locator("section.runs")).to_contain_text("main[0] on")
    screenshot(page, "job")


def test_the_page_says_why_a_job_waits(browser: Any, server: Server) -> None:
    [job_id] = server.submit(job_spec("too-big", ["true"], cpu=4096) | HELD)
    page = signed_in(browser, server, ANA_TOKEN)
    page.goto(f"{server.url}/ui#/jobs/{job_id}")
    why = page.locator("section.why")
    expect(why).to_contain_text("Why it waits", timeout=LIVE)
    reason = server.http.get(f"/v1/jobs/{job_id}/why").json()["reason"]
    assert reason
    expect(why.locator(".reason-text")).to_contain_text(reason, timeout=LIVE)
    expect(why.locator(".position")).to_have_text("1 of 1")
    page.get_by_label("new priority").fill("7")
    page.get_by_role("button", name="Set priority").click()
    expect(page.locator(".job-head .meta")).to_contain_text("priority 7", timeout=LIVE)
    assert server.job(job_id)["priority"] == 7
    expect(page.locator("ol.events")).to_contain_text("reprioritized", timeout=LIVE)


def test_the_jobs_list_gives_a_waiting_job_the_reason_why_gives(
    browser: Any, server: Server
) -> None:
    """The list showed the stored "submitted" while the job page and `flotilla why` gave
    the scheduler's reason."""
    [job_id] = server.submit(job_spec("unfit", ["true"], cpu=4096) | HELD)
    reasons: list[str] = []

    def scheduler_has_a_reason() -> bool:
        reasons.append(server.http.get(f"/v1/jobs/{job_id}/why").json()["reason"])
        return reasons[-1] != "submitted"

    wait_for(scheduler_has_a_reason, LIVE / 1000, lambda: f"a reason other than {reasons[-1:]}")
    page = signed_in(browser, server, ANA_TOKEN)
    cell = page.locator(f"tr[data-job='{job_id}'] td.reason")
    expect(cell).to_have_text(reasons[-1], timeout=LIVE)  # the whole reason, never cut
    box = cell.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280  # wrapped inside the page


def test_an_array_opens_from_its_element_and_lists_every_element(
    browser: Any, server: Server
) -> None:
    ids = server.submit(job_spec("sweep", ["true"], cpu=4096) | HELD | {"array": {"size": 3}})
    array_id = server.job(ids[0])["array_id"]
    page = signed_in(browser, server, ANA_TOKEN)
    row = page.locator(f"tr[data-job='{ids[1]}']")
    expect(row.locator(".element-id")).to_have_text(f"{array_id[:8]}_1", timeout=LIVE)
    row.get_by_role("link", name=array_id[:8]).click()
    expect(page.get_by_role("heading", name="sweep")).to_be_visible(timeout=LIVE)
    expect(page.locator(".job-head .meta")).to_contain_text("size 3")
    expect(page.locator("table[aria-label='elements'] tbody tr")).to_have_count(3)
    page.locator(f"tr[data-job='{ids[2]}']").get_by_role("link", name="_2").click()
    expect(page.locator(".job-head .meta")).to_contain_text("element 2 of array")


def test_the_header_says_a_token_is_required_and_who_is_signed_in(
    browser: Any, server: Server, local_server: Server
) -> None:
    """With the local token (a default `flotilla up`) the header said "no authentication
    (loopback)" while every request needed the token."""
    assert local_server.token is not None
    page = signed_in(browser, local_server, local_server.token)
    who = page.locator("#who")
    expect(who).to_contain_text("token required (local token)", timeout=LIVE)
    expect(who).to_contain_text(f"signed in as {getpass.getuser()}")
    expect(who).not_to_contain_text("no authentication")
    anonymous = httpx.get(f"{local_server.url}/v1/jobs")
    assert anonymous.status_code == 401  # what "token required" stands for

    page = signed_in(browser, server, VIEWER_TOKEN)  # a token config's user
    expect(page.locator("#who")).to_contain_text("token required · signed in as vi", timeout=LIVE)


def test_cancel_works_for_a_user_allowed_to_and_is_refused_otherwise(
    browser: Any, server: Server
) -> None:
    [job_id] = server.submit(job_spec("waits", ["true"], cpu=4096) | HELD)
    viewer = signed_in(browser, server, VIEWER_TOKEN)
    viewer.goto(f"{server.url}/ui#/jobs/{job_id}")
    expect(viewer.locator("#cancel-hint")).to_contain_text("no cancel permission on queue default")
    expect(viewer.locator("#cancel")).to_be_disabled()
    refused = httpx.post(
        f"{server.url}/v1/jobs/{job_id}/cancel",
        json={},
        headers={"Authorization": f"Bearer {VIEWER_TOKEN}"},
    )
    assert refused.status_code == 403  # what the page's hint stands for
    assert server.state(job_id) == "queued"

    page = signed_in(browser, server, ANA_TOKEN)
    page.goto(f"{server.url}/ui#/jobs/{job_id}")
    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("#cancel").click()
    expect(page.locator(".job-head .badge")).to_have_text("cancelled", timeout=LIVE)
    assert server.state(job_id) == "cancelled"


def test_filters_and_the_other_pages(browser: Any, server: Server) -> None:
    server.submit(
        job_spec("alpha-train", ["sleep", "30"], labels={"team": "a"}),
        job_spec("beta-eval", ["true"], labels={"team": "b"}),
    )
    page = signed_in(browser, server, ANA_TOKEN)
    page.get_by_label("Name").fill("ALPHA")
    page.get_by_label("Name").press("Enter")
    rows = page.locator("table.jobs tbody tr[data-job]")
    expect(rows).to_have_count(1, timeout=LIVE)
    expect(rows.first).to_contain_text("alpha-train")
    page.goto(f"{server.url}/ui#/jobs?label=team%3Db")
    expect(rows).to_have_count(1, timeout=LIVE)
    expect(rows.first).to_contain_text("beta-eval")

    page.get_by_role("link", name="Queues").click()
    expect(page.locator("tr[data-queue='default']")).to_be_visible(timeout=LIVE)
    expect(page.locator("svg.chart path.series").first).to_be_attached(timeout=LIVE)
    expect(page.locator("svg.chart g.box[data-row='default']")).to_be_attached(timeout=LIVE)
    screenshot(page, "queues")
    page.get_by_role("link", name="Clusters").click()
    node = page.locator("section[data-cluster='local'] tr[data-node]")
    expect(node).to_have_count(1, timeout=LIVE)
    expect(page.locator("section[data-cluster='local']")).to_contain_text("backend local")
    expect(page.locator("svg.chart rect.bar").first).to_be_attached(timeout=LIVE)  # alpha-train
    screenshot(page, "clusters")
    page.get_by_role("link", name="Scheduler").click()
    expect(page.locator("dl.facts")).to_contain_text("Leader", timeout=LIVE)
    screenshot(page, "scheduler")


def test_keyboard_and_a_narrow_screen(browser: Any, server: Server) -> None:
    [job_id] = server.submit(job_spec("a-job-with-a-rather-long-name-for-a-phone", ["true"]))
    page = signed_in(browser, server, ANA_TOKEN, viewport={"width": 390, "height": 800})
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    page.keyboard.press("Tab")  # focus sits on the page's content after a route
    expect(page.locator("select[name=queue]")).to_be_focused()
    for _ in range(5):  # back through the header: sign out, API, Scheduler, Clusters, Queues
        page.keyboard.press("Shift+Tab")
    expect(page.get_by_role("link", name="Queues")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Queues")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways on a narrow screen: {width}px"
    screenshot(page, "narrow-queues")
    page.goto(f"{server.url}/ui#/jobs/{job_id}")
    expect(page.locator(".job-head .badge")).to_have_text("succeeded", timeout=LIVE)
    expect(page.locator("section.runs")).to_contain_text("main[0] on")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the job page scrolls sideways on a narrow screen: {width}px"
    screenshot(page, "narrow-job")


def test_api_docs_work_offline(browser: Any, server: Server) -> None:
    context = browser.new_context()
    outside: list[str] = []

    def block_outside(route: Any) -> None:
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", block_outside)
    page = context.new_page()
    for path, ready in (("/docs", ".swagger-ui .info"), ("/redoc", "redoc, [role=search]")):
        page.goto(f"{server.url}{path}")
        expect(page.locator(ready).first).to_be_attached(timeout=LIVE)
    page.goto(f"{server.url}/ui")
    expect(page.get_by_label("Token")).to_be_visible()
    assert outside == []


def test_the_address_flotilla_ui_prints_opens_signed_in_and_drops_the_token(
    browser: Any, server: Server
) -> None:
    from typer.testing import CliRunner

    from flotilla.cli.main import app

    printed = CliRunner().invoke(
        app, ["ui", "--server", server.url], env={"FLOTILLA_TOKEN": ANA_TOKEN}
    )
    assert printed.exit_code == 0, printed.output
    address = printed.stdout.strip()
    assert address.startswith(f"{server.url}/ui#token=")
    page: Page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(address)
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible(timeout=LIVE)
    expect(page.get_by_label("Token")).to_have_count(0)  # no sign-in form
    assert "token" not in page.url  # gone from the address bar (and so from history)


def test_the_queue_page_shows_fair_share_and_decayed_usage(
    browser: Any, services: Services, tmp_path: Path
) -> None:
    """With settings.usage_half_life (issue 28 item 1) a person sees, per queue, the fair
    share weighted DRF aims at and the decayed usage with the share DRF orders the queue by;
    team-b, weight 3, holds nothing and wants nothing: no fair share, no usage."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        yaml.safe_dump(
            {
                "name": "decayed",
                "settings": {"cycle_interval": 0.2, "usage_half_life": 3600},
                "clusters": [
                    {
                        "name": "engine",
                        "backend": "sim",
                        "settings": {"state_dir": str(tmp_path / "engine")},
                        "nodes": [{"name": "n", "count": 1, "resources": {"cpu": 4}}],
                    }
                ],
                "queues": [{"name": "team-a"}, {"name": "team-b", "weight": 3}],
            }
        )
    )
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "state",
        extra=["--auth", str(tokens), "--fleet", str(fleet)],
        env={"UI_TEST_ANA": ANA_TOKEN, "UI_TEST_VIEWER": VIEWER_TOKEN},
        token=ANA_TOKEN,
    )
    [busy] = server.submit(
        {
            "name": "busy",
            "queue": "team-a",
            "tasks": [{"name": "main", "resources": {"cpu": 2}}],
            "payload": {"sim": {"duration": 600}},
        }
    )
    server.wait_states([busy], frozenset({"running"}))
    page = signed_in(browser, server, ANA_TOKEN)
    page.get_by_role("link", name="Queues").click()
    headers = page.locator("table.queues thead th")
    expect(headers.nth(5)).to_have_text("Fair share", timeout=LIVE)
    expect(headers.nth(6)).to_have_text("Decayed usage")
    team_a = page.locator("tr[data-queue='team-a'] td")
    expect(team_a.nth(4)).to_have_text("100.0%", timeout=LIVE)  # fair share: alone wanting
    expect(team_a.nth(5)).to_contain_text(" cpu", timeout=LIVE)  # decayed usage, in cpu
    expect(team_a.nth(5)).to_have_attribute(
        "title", "held now plus decayed usage: the share DRF orders this queue by"
    )
    team_b = page.locator("tr[data-queue='team-b'] td")
    expect(team_b.nth(4)).to_have_text("0.0%")
    expect(team_b.nth(5)).to_contain_text("0.0% (")
    screenshot(page, "queues-decayed")
    server.cancel(busy)
