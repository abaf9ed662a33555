"""`agentloop serve` with postgresql stores: two servers submit to one inbox and a worker runs the turns."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from agentloop.testing import RecordingChannel
from agentloop.workers import Inbox
from serve_kit import ALICE, BOB, auth, client, new_session, settings
from worker_kit import with_worker


def test_two_servers_on_one_inbox_keep_a_sessions_turns_in_order_and_answered_once(tmp_path: Path, postgres_url: str) -> None:
    """I9: turns of one session run one at a time in submission order, whichever server took them."""
    first, second = (settings(tmp_path, stores=postgres_url, bot="helper", turn_timeout=20.0) for _ in range(2))
    assert first.uses_inbox

    async def body(inbox: Inbox, channel: RecordingChannel) -> tuple[list[dict[str, Any]], httpx.Response, list[str]]:
        async with client(first) as one, client(second) as two:
            session = await new_session(one)
            sends = []
            for number, http in enumerate((one, two, one, two)):
                sends.append(asyncio.create_task(http.post(f"/v1/sessions/{session}/messages", json={"text": f"m{number}"}, headers=auth(ALICE))))
                await asyncio.sleep(0.05)  # submitted in this order
            replies = [reply.json() for reply in await asyncio.gather(*sends)]
            streamed = await two.post(
                f"/v1/sessions/{session}/messages", json={"text": "last"}, headers={**auth(ALICE), "Accept": "text/event-stream"}
            )
            history = await one.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))
            return replies, streamed, [message["text"] for message in history.json()["messages"]]

    replies, streamed, history = asyncio.run(with_worker(postgres_url, body))
    assert [reply["text"] for reply in replies] == ["echo: m0", "echo: m1", "echo: m2", "echo: m3"]
    assert all(reply["finish_reason"] == "success" for reply in replies)
    assert streamed.text.startswith("event: outcome\n") and '"echo: last"' in streamed.text
    assert history == ["m0", "echo: m0", "m1", "echo: m1", "m2", "echo: m2", "m3", "echo: m3", "last", "echo: last"]


def test_in_inbox_mode_one_tenant_can_neither_see_nor_claim_another_tenants_message_id(tmp_path: Path, postgres_url: str) -> None:
    served = settings(tmp_path, stores=postgres_url, bot="helper", turn_timeout=20.0)

    async def body(inbox: Inbox, channel: RecordingChannel) -> list[httpx.Response]:
        async with client(served) as http:
            bobs, alices = await new_session(http, BOB), await new_session(http, ALICE)
            claimed = await http.post(f"/v1/sessions/{bobs}/messages", json={"text": "bob first", "message_id": "m1"}, headers=auth(BOB))
            sent = await http.post(f"/v1/sessions/{alices}/messages", json={"text": "alice", "message_id": "m1"}, headers=auth(ALICE))
            retried = await http.post(f"/v1/sessions/{alices}/messages", json={"text": "alice", "message_id": "m1"}, headers=auth(ALICE))
            return [claimed, sent, retried]

    claimed, sent, retried = asyncio.run(with_worker(postgres_url, body))
    assert [answer.status_code for answer in (claimed, sent, retried)] == [200, 200, 200]
    assert sent.json()["text"] == "echo: alice" and sent.json()["message_id"] == "m1"
    assert retried.json() == sent.json()
    assert claimed.json()["turn_id"] != sent.json()["turn_id"]


def test_inbox_mode_answers_input_with_nul_or_lone_surrogates_and_refuses_a_12_kb_message_id_with_422(
    tmp_path: Path, postgres_url: str,
) -> None:
    served = settings(tmp_path, stores=postgres_url, bot="helper", turn_timeout=20.0)

    async def body(inbox: Inbox, channel: RecordingChannel) -> list[httpx.Response]:
        async with client(served) as http:
            session = await new_session(http)
            url = f"/v1/sessions/{session}/messages"
            return [
                await http.post(url, content='{"text": "a\\u0000b\\ud800c"}', headers=auth(ALICE)),
                await http.post(url, content='{"text": "hi", "message_id": "\\ud800"}', headers=auth(ALICE)),
                await http.post(url, content='{"text": "hi", "message_id": "a\\u0000"}', headers=auth(ALICE)),
                await http.post(url, json={"text": "hi", "message_id": "x" * 12_000}, headers=auth(ALICE)),
                await http.get(url, headers=auth(ALICE)),
            ]

    replaced, surrogate_id, nul_id, long_id, history = asyncio.run(with_worker(postgres_url, body))
    assert replaced.status_code == 200 and replaced.json()["text"] == "echo: a\ufffdb\ufffdc"
    assert [answer.status_code for answer in (surrogate_id, nul_id, long_id)] == [422, 422, 422]
    assert [message["text"] for message in history.json()["messages"]] == ["a\ufffdb\ufffdc", "echo: a\ufffdb\ufffdc"]
