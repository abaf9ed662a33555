"""Stalled turns after a database outage, on a real PostgreSQL: the turn of a worker that died is
taken over once, the turn of a worker that still answers is never taken, and a worker whose
registration was pruned gives its turn in flight no longer than the stall timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs
from worker_kit import cuttable

from agentloop import ChatMessage, IncomingMessage, Session, history_scope, tool
from agentloop.adapters import open_stores
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.workers import Inbox, WorkerSettings, open_inbox, queue_name, run_worker
from agentloop.workers.inbox import CONNECTION_WAIT
from systems import standard_pipeline

SESSION = Session("s1", user_id="u1")


def echo() -> ScriptedLLM:
    return ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}")


async def take_as_another_worker(inbox: Inbox) -> tuple[int, int]:
    """Register as another worker and take the next job (its worker id and the job's id)."""
    manager = inbox.app.job_manager
    worker_id = await manager.register_worker()
    job = await manager.fetch_job(queues=[queue_name(inbox.bot)], worker_id=worker_id)
    assert job is not None and job.id is not None
    return worker_id, job.id


async def held_by(inbox: Inbox, job_id: int) -> tuple[str, int | None]:
    """The job's status and the worker holding it ("gone" once it ran and was deleted)."""
    async with inbox.connector.pool.connection() as conn:
        row = await (await conn.execute("SELECT status, worker_id FROM procrastinate_jobs WHERE id = %s", (job_id,))).fetchone()
    return ("gone", None) if row is None else (str(row[0]), row[1])


@pytest.mark.parametrize("outage", [2.0, CONNECTION_WAIT + 2], ids=["shorter than the connection wait", "longer than the connection wait"])
def test_after_an_outage_longer_than_the_stall_timeout_a_dead_workers_turn_is_taken_over_once_by_the_survivor(
    postgres_url: str, tmp_path: Path, outage: float
) -> None:
    """A worker dies mid-turn (its run started, nothing sent), then the database goes away for longer
    than the stall timeout, shorter or longer than a call's wait for a connection: once it is back,
    the surviving worker reclaims the turn once and runs it, replying once and storing it once."""
    settings = WorkerSettings(stall_timeout=1.2, poll_interval=0.2)
    channel = RecordingChannel()

    async def body() -> tuple[Any, bool]:
        with open_stores(postgres_url, bot="helper") as stores, standard_pipeline(echo(), channel, stores=stores) as pipeline:
            async with cuttable(postgres_url, tmp_path) as database, open_inbox(database.url, bot="helper") as inbox:
                key = await inbox.submit(SESSION, IncomingMessage("hello"))
                await take_as_another_worker(inbox)
                assert await inbox.start_turn(key) is not None  # the dead worker's run 1
                survivor = asyncio.create_task(run_worker(inbox, pipeline.build(), settings, install_signal_handlers=False))
                try:
                    await asyncio.sleep(2 * settings.heartbeat_interval)
                    await database.cut()
                    await asyncio.sleep(outage)
                    await database.restore()
                    return await inbox.wait(key, timeout=60), survivor.done()
                finally:
                    survivor.cancel()
                    await asyncio.gather(survivor, return_exceptions=True)

    with capture_logs() as logs:
        result, survivor_ended = asyncio.run(body())
    with open_stores(postgres_url, bot="helper") as stores:
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
    events = [e["event"] for e in logs]
    assert not survivor_ended and events.count("worker.database_lost") == events.count("worker.database_back") <= 1
    assert events.count("worker.turn_reclaimed") == 1
    assert result.runs == 2 and result.reply_text == "echo: hello" and channel.texts == ["echo: hello"]
    assert history == (ChatMessage.user("hello"), ChatMessage.assistant("echo: hello"))


def test_a_turn_is_not_reclaimed_after_an_outage_while_its_worker_heartbeats_again_promptly(postgres_url: str) -> None:
    """An outage longer than the stall timeout that a worker's calls wait out (shorter than a call's
    wait for a connection): every heartbeat is as old as the outage, so the worker reclaims nothing
    until the database has answered it promptly for the stall timeout, by when the live worker
    holding the turn has heartbeaten again, one interval after the outage, as it does."""
    settings = WorkerSettings(stall_timeout=2.4, poll_interval=0.2)
    interval, back = settings.heartbeat_interval, asyncio.Event()

    async def body() -> tuple[int, tuple[str, int | None]]:
        with open_stores(postgres_url, bot="helper") as stores, standard_pipeline(echo(), RecordingChannel(), stores=stores) as pipeline:
            async with open_inbox(postgres_url, bot="helper") as inbox:
                await inbox.submit(SESSION, IncomingMessage("hello"))
                holder, job_id = await take_as_another_worker(inbox)
                pool = inbox.connector.pool
                lend = pool.connection

                @asynccontextmanager
                async def lend_after_the_outage(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                    await back.wait()
                    async with lend(*args, **kwargs) as conn:
                        yield conn

                async def the_live_holder() -> None:
                    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
                        await back.wait()
                        while True:
                            await asyncio.sleep(interval)
                            await conn.execute("UPDATE procrastinate_workers SET last_heartbeat = now() WHERE id = %s", (holder,))

                holding = asyncio.create_task(the_live_holder())
                running = asyncio.create_task(run_worker(inbox, pipeline.build(), settings, install_signal_handlers=False))
                try:
                    await asyncio.sleep(2 * interval)  # running and registered; the outage starts
                    pool.connection = lend_after_the_outage  # type: ignore[method-assign]
                    await asyncio.sleep(settings.stall_timeout + 2 * interval)
                    back.set()
                    await asyncio.sleep(2 * settings.stall_timeout)
                    pool.connection = lend  # type: ignore[method-assign]
                    return holder, await held_by(inbox, job_id)
                finally:
                    for task in (running, holding):
                        task.cancel()
                    await asyncio.gather(running, holding, return_exceptions=True)

    with capture_logs() as logs:
        holder, (status, worker_id) = asyncio.run(body())
    assert (status, worker_id) == ("doing", holder)
    assert not [e for e in logs if e["event"] == "worker.turn_reclaimed"]


def test_a_worker_whose_registration_was_pruned_gives_its_turn_in_flight_no_longer_than_the_stall_timeout(postgres_url: str) -> None:
    """After an outage another worker may prune this one's registration (its heartbeat as old as the
    outage) and its turns are then run again elsewhere after the stall timeout: the worker stops its
    turn in flight by then, not after its shutdown grace, registers again and the turn is run again
    once, answered well before the grace would have ended."""
    settings = WorkerSettings(stall_timeout=1.2, shutdown_grace=60, poll_interval=0.2)
    started, calls = asyncio.Event(), list[str]()

    @tool
    async def lookup(city: str) -> str:
        """Look a city up."""
        calls.append(city)
        if len(calls) == 1:  # the first run hangs until it is stopped
            started.set()
            await asyncio.Event().wait()
        return f"{city}: sunny"

    llm = ScriptedLLM([ScriptedLLM.tool_call("lookup", {"city": "Lisbon"}), ScriptedLLM.tool_call("lookup", {"city": "Lisbon"}), "Sunny."])
    channel = RecordingChannel()

    async def body() -> Any:
        with open_stores(postgres_url, bot="helper") as stores, standard_pipeline(llm, channel, stores=stores, tools=[lookup]) as pipeline:
            async with open_inbox(postgres_url, bot="helper") as inbox:
                running = asyncio.create_task(run_worker(inbox, pipeline.build(), settings, install_signal_handlers=False))
                try:
                    key = await inbox.submit(SESSION, IncomingMessage("weather in Lisbon?"))
                    await asyncio.wait_for(started.wait(), 20)
                    async with inbox.connector.pool.connection() as conn:  # what a worker starting after an outage does
                        await conn.execute("DELETE FROM procrastinate_workers")
                    return await inbox.wait(key, timeout=settings.shutdown_grace / 4)
                finally:
                    running.cancel()
                    await asyncio.gather(running, return_exceptions=True)

    with capture_logs() as logs:
        result = asyncio.run(body())
    assert [e["event"] for e in logs].count("worker.registration_lost") == 1
    assert result.runs == 2 and result.reply_text == "Sunny." and channel.texts == ["Sunny."] and calls == ["Lisbon", "Lisbon"]
