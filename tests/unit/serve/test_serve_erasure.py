"""Erasing a user while their turns run through the server: no turn breaks, no other session changes,
each store keeps a turn's rows whole or not at all, and an erase after the last turn leaves nothing."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from pathlib import Path
from collections.abc import AsyncIterator
from typing import Any

import httpx

from agentloop import LlmReply, LlmRequest
from agentloop.adapters import Stores, open_stores
from agentloop.messages import Finished, StreamEvent, TextDelta
from agentloop.privacy import Erased, Subject
from serve_kit import ALICE, BOB, auth, client, new_session, settings

ALICE_SUBJECT = Subject.user("alice", org_id="acme")
TURNS = 6


class SlowEcho:
    """Echoes the message after a pause, so several turns are in flight at once."""

    model = "slow-echo"

    async def complete(self, request: LlmRequest) -> LlmReply:
        await asyncio.sleep(0.2)
        return LlmReply(f"echo: {request.messages[-1].content}", model=self.model)

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamEvent]:
        reply = await self.complete(request)
        yield TextDelta(reply.content or "")
        yield Finished(reply)


async def _say(http: httpx.AsyncClient, token: str, session: str, text: str) -> httpx.Response:
    return await http.post(f"/v1/sessions/{session}/messages", json={"text": text}, headers=auth(token))


async def _erase(stores: Stores) -> Erased:
    return await stores.erase(ALICE_SUBJECT, actor="admin")


def _history(reply: httpx.Response) -> list[str]:
    assert reply.status_code == 200, reply.text
    return [message["text"] for message in reply.json()["messages"]]


def test_erasing_a_user_while_their_turns_run_through_serve_breaks_no_turn_and_leaves_nothing(tmp_path: Path) -> None:
    served = settings(tmp_path, llm=SlowEcho(), rate_burst=100)

    async def body() -> Any:
        async with client(served) as http, _own_stores(served.stores) as eraser:
            alice_sessions = [await new_session(http, ALICE) for _ in range(2)]
            bob_session = await new_session(http, BOB)
            alice_turns = [asyncio.create_task(_say(http, ALICE, alice_sessions[n % 2], f"aliceword {n}")) for n in range(TURNS)]
            bob_turns = [asyncio.create_task(_say(http, BOB, bob_session, f"bobword {n}")) for n in range(TURNS)]
            await asyncio.wait(alice_turns, return_when=asyncio.FIRST_COMPLETED)  # erase once alice has rows, her other turns in flight
            erased = await _erase(eraser)
            replies = await asyncio.gather(*alice_turns, *bob_turns)
            during = [_history(await http.get(f"/v1/sessions/{s}/messages", headers=auth(ALICE))) for s in alice_sessions]
            final = await _erase(eraser)
            after = [_history(await http.get(f"/v1/sessions/{s}/messages", headers=auth(ALICE))) for s in alice_sessions]
            bob = _history(await http.get(f"/v1/sessions/{bob_session}/messages", headers=auth(BOB)))
            again = await _say(http, ALICE, alice_sessions[0], "aliceword again")
            return replies, erased, during, final, after, bob, again

    replies, erased, during, final, after, bob, again = asyncio.run(body())
    assert [reply.status_code for reply in replies] == [200] * (2 * TURNS)
    for history in during:  # whatever a turn in flight wrote is there whole: each message with its answer
        assert history[1::2] == [f"echo: {text}" for text in history[0::2]]
    assert after == [[], []]
    assert sorted(bob) == sorted(text for n in range(TURNS) for text in (f"bobword {n}", f"echo: bobword {n}"))
    assert again.status_code == 200 and again.json()["text"] == "echo: aliceword again"
    with open_stores(served.stores) as stores:
        records = asyncio.run(_records(stores))
    left = [record for record in records if "aliceword" in json.dumps(record, default=str) and "again" not in json.dumps(record)]
    assert left == [] and erased.total > 0


@asynccontextmanager
async def _own_stores(url: str) -> AsyncIterator[Stores]:
    """The stores on their own connections, as `agentloop stores erase` opens them."""
    with open_stores(url) as stores:
        yield stores


async def _records(stores: Any) -> list[dict[str, Any]]:
    return [record async for record in stores.export(ALICE_SUBJECT, actor="test")]
