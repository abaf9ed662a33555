"""Erasing a user on PostgreSQL takes their finished inbox messages and procrastinate jobs with the
rest of their rows, while their turns run through a worker, and leaves other users' sessions whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentloop import IncomingMessage, Session, history_scope
from agentloop.adapters import open_stores
from agentloop.privacy import Subject
from agentloop.testing import RecordingChannel
from agentloop.workers import Inbox, erase_inbox, export_inbox
from worker_kit import with_worker

ADA = Session("ada-session", user_id="ada", org_id="o1")
BOB = Session("bob-session", user_id="bob", org_id="o1")
ADA_SUBJECT = Subject.user("ada", org_id="o1")


def test_erasing_a_user_while_their_turns_run_on_a_worker_leaves_nothing_of_theirs_and_bob_whole(postgres_url: str) -> None:
    async def body(inbox: Inbox, channel: RecordingChannel) -> Any:
        ada_first = [await inbox.submit(ADA, IncomingMessage(f"adaword {n}")) for n in range(3)]
        bob_ids = [await inbox.submit(BOB, IncomingMessage(f"bobword {n}")) for n in range(3)]
        with open_stores(postgres_url, bot="helper") as stores:
            during = await stores.erase(ADA_SUBJECT, actor="admin")  # while ada's turns are queued or running
            for key in [*ada_first, *bob_ids]:
                await inbox.wait(key, timeout=30)
            after = await stores.erase(ADA_SUBJECT, actor="admin")
        inbox_erased = await erase_inbox(postgres_url, "helper", ADA_SUBJECT)
        left = [record async for record in export_inbox(postgres_url, "helper", ADA_SUBJECT)]
        bobs = [record async for record in export_inbox(postgres_url, "helper", Subject.user("bob", org_id="o1"))]
        return during, after, inbox_erased, left, bobs, [await inbox.result(key) for key in bob_ids]

    during, after, inbox_erased, left, bobs, bob_results = asyncio.run(with_worker(postgres_url, body))
    assert inbox_erased == 3 and left == [] and len(bobs) == 3
    assert all(result is not None and result.reply_text == f"echo: bobword {n}" for n, result in enumerate(bob_results))
    with open_stores(postgres_url, bot="helper") as stores:
        records = asyncio.run(_export(stores, ADA_SUBJECT))
        bob_history = asyncio.run(stores.sessions.recent(history_scope(BOB), 10))
    assert "adaword" not in json.dumps(records, default=str)
    assert [m.content for m in bob_history] == [text for n in range(3) for text in (f"bobword {n}", f"echo: bobword {n}")]
    assert during.total + after.total > 0


async def _export(stores: Any, subject: Subject) -> list[dict[str, Any]]:
    return [record async for record in stores.export(subject, actor="test")]
