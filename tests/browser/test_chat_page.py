"""The chat page in headless Chromium against a real `agentloop serve` app on a loopback port.

The model is a ScriptedLLM that streams its answer a few characters at a time with a pause
between pieces, so the test sees the answer grow before it is complete.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from playwright.sync_api import Page, expect

from agentloop import LlmReply, LlmRequest, Role, Session
from agentloop.adapters import open_note_taking, open_stores
from agentloop.notes import KnowledgeItem, Layer, NoteType
from agentloop.serve import ServeSettings, create_app
from agentloop.testing import ScriptedLLM, StreamCut
from agentloop.testing.serve import served

T = TypeVar("T")
ANSWER = "Paris is the capital of France, and has been for a very long time."
MARKDOWN = """Here is how:

```python
print("<b>hi</b>")
```

It is **bold**, *leaning* and `inline`; see [the docs](https://example.com/docs).

- one
- two"""
HOSTILE = """<script>window.__pwned = "script"</script>

<img src="x" onerror="window.__pwned = 'onerror'">

[click me](javascript:window.__pwned='link') and [me too](JaVaScRiPt:alert(1))"""
TOKEN = "page-test-token-0123456789"
TOKENS = f"""
secret = "a-page-test-secret-of-enough-length"

[[tokens]]
token = "{TOKEN}"
user = "ada"
org = "acme"
team = "web"
project = "chat"
"""


def reply(request: LlmRequest) -> str | LlmReply | StreamCut:
    """Answers a question; asked to delete a file, calls the tool that needs approval, then says what it did;
    asked about the weather, its stream breaks off."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return f"Done: {last.content}."
    if "delete" in (last.content or ""):
        return ScriptedLLM.tool_call("delete_file", {"path": "notes.txt"})
    if "weather" in (last.content or ""):
        return ScriptedLLM.cut("It is sunny in Oslo today.", after=3)
    if "example" in (last.content or ""):
        return MARKDOWN
    if "trick" in (last.content or ""):
        return HOSTILE
    return ANSWER


def settings(tmp_path: Path, **overrides: str) -> ServeSettings:
    """A server for the token above on stores in `tmp_path`, its model streaming six characters every 80 ms."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    model = ScriptedLLM(reply, chunk=6, pace=0.08)
    return ServeSettings(tokens=tokens, llm=model, stores=str(tmp_path / "stores"), **overrides)


def log_in(page: Page, url: str) -> None:
    page.goto(url)
    page.get_by_label("Access token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("ada · acme / web / chat")).to_be_visible()


def send(page: Page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def run_async(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end; in a thread of its own, since sync Playwright's event loop owns this one."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, work).result()


async def _seed_note(stores_url: str) -> int:
    """A note in the token's project about the question the test asks; returns its id."""
    with open_stores(stores_url, bot="bot") as stores, open_note_taking(stores, ScriptedLLM()) as notes:
        chain = notes.chain(Session("seed", user_id="ada", org_id="acme", team_id="web", project_id="chat"))
        text = "## Context\nWhat is the capital of France? Paris is the capital of France."
        note = KnowledgeItem(
            NoteType.PATTERN, Layer.PROJECT, chain.truncated(Layer.PROJECT), "Capital of France", text,
            notes.knowledge.embed(text), datetime.now(UTC),
        )
        added = await notes.knowledge.add(note)
        assert added.id is not None
        return added.id


async def _usefulness(stores_url: str, note_id: int) -> int:
    with open_stores(stores_url, bot="bot") as stores, open_note_taking(stores, ScriptedLLM()) as notes:
        return (await notes.knowledge.get(note_id)).usefulness_score


def test_a_streamed_answer_grows_thumbs_up_credits_its_note_the_session_ends_and_a_stopped_server_shows_an_error(
    page: Page, tmp_path: Path
) -> None:
    served_settings = settings(tmp_path)
    note_id = run_async(_seed_note(served_settings.stores))
    with served(create_app(served_settings)) as url:
        page.goto(url)
        expect(page.get_by_text("agentloop serve --tokens FILE")).to_be_visible()
        page.get_by_label("Access token").fill("not-a-token")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("alert")).to_contain_text("token")
        expect(page.get_by_label("Access token")).to_be_visible()

        log_in(page, url)
        expect(page.get_by_text("Ask the assistant anything")).to_be_visible()
        send(page, "What is the capital of France?")
        expect(page.get_by_text("Ask the assistant anything")).to_be_hidden()
        answer = page.locator(".message.assistant .text").last
        expect(answer).to_contain_text("Paris is")
        partial = answer.inner_text()
        assert ANSWER.startswith(partial) and partial != ANSWER, f"the answer was not streamed: {partial!r}"
        expect(answer).to_have_text(ANSWER)

        page.get_by_role("button", name="Good answer").click()
        expect(page.get_by_text("Thanks! What helped with this answer will be used more often.")).to_be_visible()
        expect(page.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "true")

        page.get_by_role("button", name="End session").click()
        expect(page.get_by_text("Conversation ended. Your next message starts a new one.")).to_be_visible()
    assert run_async(_usefulness(served_settings.stores, note_id)) == 1

    send(page, "Are you still there?")
    expect(page.get_by_role("alert")).to_have_text(re.compile("The server cannot be reached"))
    expect(page.get_by_label("Message")).to_have_value("Are you still there?")
    expect(page.locator(".message.user")).to_have_count(1)


def test_a_tool_call_awaiting_approval_runs_once_approved_on_the_page_and_a_failed_turn_says_how_it_ended(page: Page, tmp_path: Path) -> None:
    with served(create_app(settings(tmp_path, pipeline="chat_page_bot:factory"))) as url:
        log_in(page, url)
        send(page, "Please delete notes.txt")
        request = page.get_by_role("group", name="Tool call awaiting approval")
        expect(request.locator(".tool")).to_have_text("delete_file")
        expect(request.locator(".arguments")).to_contain_text('"path": "notes.txt"')
        request.get_by_role("button", name="Approve").click()
        expect(page.get_by_text("You approved delete_file.")).to_be_visible()
        answer = page.locator(".message.assistant").last
        expect(answer.locator(".text")).to_have_text("Done: deleted notes.txt.")

        steps = answer.locator("details.tools")
        expect(steps.locator("summary")).to_have_text("Used 1 tool: delete_file")
        result = steps.locator(".step .result")
        expect(result).to_be_hidden()
        steps.locator("summary").click()
        expect(steps.locator(".step .tool")).to_have_text("delete_file")
        expect(steps.locator(".step .arguments")).to_contain_text('"path": "notes.txt"')
        expect(result).to_have_text("deleted notes.txt")
        steps.locator("summary").click()
        expect(result).to_be_hidden()

        send(page, "How is the weather?")
        broken = page.locator(".message.assistant").last
        expect(broken.locator(".text")).to_have_text(re.compile("cut off"))
        expect(broken.locator(".reason")).to_have_text(re.compile(r"^Something went wrong while answering: .+\.$"))


def test_an_answer_in_markdown_shows_its_code_block_emphasis_list_and_web_link(page: Page, tmp_path: Path) -> None:
    with served(create_app(settings(tmp_path))) as url:
        log_in(page, url)
        send(page, "Show me an example")
        answer = page.locator(".message.assistant .text").last
        expect(answer.locator("ul > li")).to_have_text(["one", "two"])
        expect(answer.locator("pre > code")).to_have_text('print("<b>hi</b>")')
        expect(answer.locator("pre > code")).to_have_class("language-python")
        expect(answer.locator("strong")).to_have_text("bold")
        expect(answer.locator("em")).to_have_text("leaning")
        expect(answer.locator("p > code")).to_have_text("inline")
        expect(answer.get_by_role("link", name="the docs")).to_have_attribute("href", "https://example.com/docs")
        expect(answer.locator("b")).to_have_count(0)


def test_a_hostile_markdown_answer_renders_inert_its_html_shown_as_text_and_its_javascript_links_unlinked(
    page: Page, tmp_path: Path
) -> None:
    with served(create_app(settings(tmp_path))) as url:
        log_in(page, url)
        send(page, "Play a trick on me")
        answer = page.locator(".message.assistant .text").last
        expect(answer).to_contain_text("me too")
        expect(answer).to_contain_text("""<script>window.__pwned = "script"</script>""")
        expect(answer).to_contain_text("""<img src="x" onerror="window.__pwned = 'onerror'">""")
        assert page.locator("#transcript script, #transcript img, #transcript [onerror]").count() == 0
        assert page.locator("#transcript a").count() == 0
        unlinked = answer.locator(".unsafe-link")
        expect(unlinked).to_have_text(["click me", "me too"])
        unlinked.first.click()
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.evaluate("Array.from(document.querySelectorAll('[href]'), e => e.getAttribute('href'))") == [
            "data:,", "/static/style.css"
        ], "an element other than the page's own links has an href"
