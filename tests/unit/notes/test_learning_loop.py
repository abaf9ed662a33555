"""The learning loop in real use, end to end over HTTP: a served session is ended and distilled,
later sessions of the same task get its note, their feedback raises its usefulness, and
`agentloop notes` drives its lifecycle while the server runs."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import httpx

from agentloop.cli import main
from agentloop.testing import ScriptedLLM
from learning_kit import NOTE
from serve_kit import ALICE, auth, client, new_session, settings

TITLE = "Exporting the orders table through a rate-limited API"
SOLUTION = "Page through rate-limited APIs one page at a time"


def test_three_served_sessions_of_one_task_learn_from_the_first(tmp_path: Path) -> None:
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("fetch_page", {"page": 1}),
        ScriptedLLM.tool_call("fetch_page", {"page": 2}),
        ScriptedLLM.tool_call("count_rows"),
        "Export done: 1000 rows.",
        NOTE,                                                   # distilling session 1 when it ends
        "Page through the API and check the total.",
        "Same as before: one page at a time.",
        "Pages, then the count.",
    ])
    served = settings(tmp_path, llm, pipeline="learning_kit:export_bot")
    data = ["--data-dir", served.stores]

    def notes_cli(*argv: str) -> str:
        out = io.StringIO()
        assert main(["notes", *argv, *data], out) == 0
        return out.getvalue()

    def prompt() -> str:
        return llm.requests[-1].messages[0].content or ""

    async def say(http: httpx.AsyncClient, session: str, text: str) -> str:
        reply = await http.post(f"/v1/sessions/{session}/messages", json={"text": text}, headers=auth(ALICE))
        assert reply.status_code == 200 and reply.json()["finish_reason"] == "success", reply.text
        turn_id: str = reply.json()["turn_id"]
        return turn_id

    async def thumbs_up(http: httpx.AsyncClient, session: str, turn_id: str) -> object:
        rated = await http.post(f"/v1/sessions/{session}/feedback", json={"turn_id": turn_id, "positive": True}, headers=auth(ALICE))
        return rated.json()

    async def body() -> None:
        async with client(served) as http:
            first = await new_session(http)
            await say(http, first, "Run the nightly export of the orders table")
            assert SOLUTION not in prompt()
            ended = await http.post(f"/v1/sessions/{first}/end", headers=auth(ALICE))
            assert ended.json()["status"] == "stored", ended.text

            second = await new_session(http)
            turn = await say(http, second, "The orders export hits the API rate limit, what now?")
            assert SOLUTION in prompt(), "the second session is shown the first one's note"
            assert await thumbs_up(http, second, turn) == {"credited": 1}

            third = await new_session(http)
            turn = await say(http, third, "The orders export is rate limited again, what now?")
            assert SOLUTION in prompt(), "the third session is shown the note too"
            assert await thumbs_up(http, third, turn) == {"credited": 1}

            listed = await asyncio.to_thread(notes_cli, "list")
            assert listed == f"#1  draft      pattern    team     retrieved 2  useful 2  {TITLE}\n"
            for action, moved in (("propose", "draft -> proposed"), ("accept", "proposed -> accepted"), ("deprecate", "accepted -> deprecated")):
                assert await asyncio.to_thread(notes_cli, action, "1") == f"note #1: {moved}\n"

            await say(http, third, "And the orders export after that, what now?")
            assert SOLUTION not in prompt(), "a deprecated note is no longer offered"

    asyncio.run(body())
