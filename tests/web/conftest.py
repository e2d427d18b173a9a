"""Browser fixtures: Debian's Chromium driven by Playwright, and a real ``flotilla up``.

Chromium comes from ``scripts/install-chromium`` (apt), never from Playwright's own download.
Without it these tests skip on a laptop and fail under CI=true: CI never silently skips them.
Screenshots go to ``artifacts/screenshots/`` (gitignored) for a person to look at.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.service import Server, Services

CHROMIUM = Path(os.environ.get("FLOTILLA_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"

ANA_TOKEN = "ana-token-for-browser-tests"
VIEWER_TOKEN = "viewer-token-for-browser-tests"
TOKENS = """
users:
  - name: ana
    token_env: UI_TEST_ANA
    queues: {"*": [admin]}
  - name: vi
    token_env: UI_TEST_VIEWER
    queues: {"*": [submit, read]}
"""


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI runs the browser tests: run scripts/install-chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _missing(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def server(services: Services, tmp_path: Path) -> Server:
    """``flotilla up`` with two users: ana (admin of every queue) and vi (submit and read on
    every queue, no cancel)."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    return services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "state",
        extra=["--auth", str(tokens), "--cycle-interval", "0.2"],
        env={"UI_TEST_ANA": ANA_TOKEN, "UI_TEST_VIEWER": VIEWER_TOKEN},
        token=ANA_TOKEN,
    )


@pytest.fixture
def local_server(services: Services, tmp_path: Path) -> Server:
    """``flotilla up`` as a person starts it: no token config, so the server makes a local
    token for the user it runs as (``server.token``)."""
    return services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "state",
        extra=["--cycle-interval", "0.2"],
    )


def screenshot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
