"""The HTML report of `agentloop eval` (run end to end against an OpenAI-compatible model server on a
loopback port) opened in headless Chromium: the table renders, and a failing case opens to its transcript."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from agentloop.testing.http import ScriptedServer
from eval_kit import eval_over_http


def test_the_report_table_renders_and_a_failing_case_opens_to_its_transcript(page: Page, tmp_path: Path) -> None:
    with ScriptedServer() as server:
        ran = eval_over_http(server, tmp_path)
    assert ran.status == 0, ran.stderr
    page.goto(ran.html_report.as_uri())
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#runs thead")).to_contain_text("LLM calls")
    expect(rows.nth(0)).to_contain_text("pass")
    failing = page.locator('#runs tr[data-passed="false"]')
    expect(failing).to_contain_text("refunds")
    transcript = failing.locator("details.transcript .lines")
    expect(transcript).to_be_hidden()
    failing.locator("details.transcript > summary").click()
    expect(transcript).to_be_visible()
    expect(transcript).to_contain_text("user: Please refund order A-17")
    expect(transcript).to_contain_text("assistant: I cannot do that.")
    expect(failing).to_contain_text("does not contain 'refunded'")
