"""Headless Chromium for the chat page's tests: Debian's `chromium` driven by Playwright.

A missing browser fails the test with the command that installs it; it never skips, so a
machine without chromium cannot pass the suite by not running the page's test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium_missing_message(path: Path) -> str | None:
    """Why the browser tests cannot run with the browser at `path`, naming the fix; None when they can."""
    if os.access(path, os.X_OK):
        return None
    return (
        f"the browser tests need Debian's chromium at {path}, which is missing: run "
        "`sh tests/install-system-deps.sh` from the repository (it installs chromium with apt-get), "
        "or set CHROMIUM to a chromium binary"
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless chromium per test module. Not one per run: while Playwright's sync API is
    open it keeps an event loop running in the main thread, and asyncio.run elsewhere would fail."""
    missing = chromium_missing_message(CHROMIUM)
    if missing is not None:
        pytest.fail(missing, pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser tab (its own sessionStorage) for one test; a script error on the page fails the test."""
    context = browser.new_context(viewport={"width": 900, "height": 800})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    script_errors: list[str] = []
    tab.on("pageerror", lambda error: script_errors.append(str(error)))
    try:
        yield tab
    finally:
        context.close()
    assert script_errors == [], f"the page's script failed: {script_errors}"
