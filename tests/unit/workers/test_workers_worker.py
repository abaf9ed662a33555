"""Workers on a real PostgreSQL: a lost worker's turn is taken back and run again, writing
history once and sending its reply at most once, and the re-run shows in its outcome."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from agentloop import ChatMessage, FailureSource, IncomingMessage, Session, history_scope
from agentloop.adapters import open_stores
from agentloop.testing import RecordingChannel
from agentloop.workers import Inbox, open_inbox, queue_name, reclaim_stalled
from worker_kit import with_worker

SESSION = Session("s1", user_id="u1")


async def take_as_a_worker_that_dies(inbox: Inbox, *, heartbeat_age: float) -> int:
    """Fetch the next job as a worker that then stops, its last heartbeat `heartbeat_age` seconds ago."""
    manager = inbox.app.job_manager
    worker_id = await manager.register_worker()
    job = await manager.fetch_job(queues=[queue_name(inbox.bot)], worker_id=worker_id)
    assert job is not None and job.id is not None
    async with await psycopg.AsyncConnection.connect(inbox.connector.pool.conninfo, autocommit=True) as conn:
        await conn.execute(
            "UPDATE procrastinate_workers SET last_heartbeat = now() - make_interval(secs => %s) WHERE id = %s",
            (heartbeat_age, worker_id),
        )
    return job.id


def test_a_lost_workers_turn_is_run_again_writing_history_once_and_sending_nothing_twice(postgres_url: str) -> None:
    """I13: the lost run got as far as delivering and writing history; the re-run repeats neither."""

    async def body() -> Any:
        async with open_inbox(postgres_url, bot="helper") as inbox:
            message_id = await inbox.submit(SESSION, IncomingMessage("hello"))
            await take_as_a_worker_that_dies(inbox, heartbeat_age=60)
            pending = await inbox.start_turn(message_id)  # what the lost worker did before it died
            assert pending is not None and pending.run == 1
            assert await inbox.claim_delivery(message_id, pending.run)
            assert await inbox.claim_delivery(message_id, pending.run), "the same run may claim again (before streaming, then before closing)"
            assert not await inbox.claim_delivery(message_id, pending.run + 1)
            with open_stores(postgres_url, bot="helper") as stores:
                scope = history_scope(SESSION)
                await stores.sessions.append(scope, [ChatMessage.user("hello"), ChatMessage.assistant("echo: hello")], key=message_id)
            assert await reclaim_stalled(inbox, stall_timeout=5) == 1
            return message_id

    message_id = asyncio.run(body())

    async def rerun(inbox: Inbox, channel: RecordingChannel) -> Any:
        return await inbox.wait(message_id, timeout=20), channel.texts

    result, texts = asyncio.run(with_worker(postgres_url, rerun))
    assert texts == []  # the lost run delivered it
    assert result.runs == 2 and result.reply_text == "echo: hello"
    (rerun_failure,) = [f for f in result.outcome.failures if f.component == "inbox"]
    assert rerun_failure.source is FailureSource.SYSTEM and "run again (run 2)" in rerun_failure.message
    with open_stores(postgres_url, bot="helper") as stores:
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
    assert history == (ChatMessage.user("hello"), ChatMessage.assistant("echo: hello"))


def test_the_turn_of_a_worker_that_still_heartbeats_is_never_taken_from_it(postgres_url: str) -> None:
    async def body() -> tuple[int, int]:
        async with open_inbox(postgres_url, bot="helper") as inbox:
            await inbox.submit(SESSION, IncomingMessage("hello"))
            await take_as_a_worker_that_dies(inbox, heartbeat_age=1)
            alive = await reclaim_stalled(inbox, stall_timeout=5)
            return alive, await reclaim_stalled(inbox, stall_timeout=0.5)

    assert asyncio.run(body()) == (0, 1)
