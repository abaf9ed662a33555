"""Workers on a real PostgreSQL: a lost worker's turn, or one whose writes did not land, is run
again, writing history once and sending its reply at most once, and the re-run shows in its outcome."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import psycopg
import pytest
from procrastinate.exceptions import ConnectorException
from structlog.testing import capture_logs

from agentloop import ChatMessage, FailureKind, FailureSource, FinishReason, IncomingMessage, Session, history_scope, memory_scope
from agentloop.adapters import Stores, open_stores
from agentloop.errors import StoreUnavailableError
from agentloop.outcome import TurnOutcome
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.stores import Fault, StoreFaults, failing_stores
from agentloop.workers import Inbox, MessageResult, WorkerSettings, open_inbox, queue_name, reclaim_stalled, run_worker, worker
from agentloop.workers.errors import TurnNotStoredError
from agentloop.workers.inbox import MAX_RUNS
from systems import standard_pipeline
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


async def answered_by_a_worker_on(stores: Stores, url: str, text: str) -> tuple[MessageResult, list[str]]:
    """Submit `text` and wait for its result while one in-process worker runs its turn on `stores`."""
    channel = RecordingChannel()
    llm = ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}")
    with standard_pipeline(llm, channel, stores=stores) as pipeline:
        async with open_inbox(url, bot="helper") as inbox:
            worker = asyncio.create_task(
                run_worker(inbox, pipeline.build(), WorkerSettings(poll_interval=0.2), install_signal_handlers=False)
            )
            try:
                return await inbox.wait(await inbox.submit(SESSION, IncomingMessage(text)), timeout=30), channel.texts
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)


def test_a_turn_whose_history_write_failed_is_run_again_storing_its_exchange_once_and_replying_once(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """I15 in a worker: the history write landed but reported a failure; the run is not finished, its
    retry's keyed append adds nothing, and the reply already sent is not sent again. The expected
    failure is one warning line, with no traceback from the worker or from procrastinate."""
    caplog.set_level(logging.DEBUG)
    faults = StoreFaults.first("sessions.append", Fault.AFTER)
    with open_stores(postgres_url, bot="helper") as stores, capture_logs() as logs:
        result, texts = asyncio.run(answered_by_a_worker_on(failing_stores(stores, faults), postgres_url, "hello"))
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
    assert faults.failed == [("sessions.append", Fault.AFTER)]
    said = [e for e in logs if e["event"] in ("worker.turn_not_stored", "worker.turn_failed")]
    assert [(e["event"], e["log_level"], "exc_info" in e) for e in said] == [("worker.turn_not_stored", "warning", False)]
    assert not [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], TurnNotStoredError)]
    assert result.runs == 2 and result.finish_reason is FinishReason.SUCCESS and texts == ["echo: hello"]
    assert [f.component for f in result.outcome.failures] == ["inbox"]  # the re-run, and nothing of the first run
    assert history == (ChatMessage.user("hello"), ChatMessage.assistant("echo: hello"))


@pytest.mark.parametrize("fault", [Fault.BEFORE, Fault.AFTER])
def test_a_turn_whose_memory_write_failed_after_its_history_landed_is_run_again_storing_its_memory_entry_once(
    postgres_url: str, fault: Fault
) -> None:
    """I15 in a worker: history landed, then the memory write failed (before or after it happened); the
    re-run's keyed history append adds nothing and its keyed memory add stores the entry exactly once."""
    faults = StoreFaults.first("memory.add", fault)
    with open_stores(postgres_url, bot="helper") as stores:
        result, texts = asyncio.run(answered_by_a_worker_on(failing_stores(stores, faults), postgres_url, "hello"))
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
        memory = asyncio.run(stores.memory.recent(memory_scope(SESSION), 10))
    assert faults.failed == [("memory.add", fault)]
    assert result.runs == 2 and result.finish_reason is FinishReason.SUCCESS and not result.outcome.writes_lost
    assert texts == ["echo: hello"]
    assert history == (ChatMessage.user("hello"), ChatMessage.assistant("echo: hello"))
    assert [(e.user_text, e.assistant_text) for e in memory] == [("hello", "echo: hello")]


@pytest.mark.parametrize("fault", [Fault.BEFORE, Fault.AFTER])
def test_a_turn_whose_outcome_write_failed_is_run_again_replying_once_and_storing_its_exchange_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fault: Fault
) -> None:
    """I15 for the inbox's own write: the outcome was not stored (or was, its answer lost with the
    connection); the job is run again, the reply already sent is not sent again, the exchange is in
    history once, the submitter gets the outcome, and the lost connection leaves no traceback."""
    caplog.set_level(logging.DEBUG)
    real, failed = Inbox.finish_turn, list[str]()

    async def finish_lost_once(inbox: Inbox, message_id: str, outcome: TurnOutcome | None, *, error: str | None = None) -> None:
        if failed:
            return await real(inbox, message_id, outcome, error=error)
        failed.append(message_id)
        if fault is Fault.AFTER:
            await real(inbox, message_id, outcome, error=error)
        lost = psycopg.OperationalError("server closed the connection unexpectedly")
        raise StoreUnavailableError(f"the inbox at {inbox.url}", "its database cannot be reached") from lost

    monkeypatch.setattr(Inbox, "finish_turn", finish_lost_once)
    with open_stores(postgres_url, bot="helper") as stores:
        result, texts = asyncio.run(answered_by_a_worker_on(stores, postgres_url, "hello"))
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
    assert len(failed) == 1 and texts == ["echo: hello"]
    assert history == (ChatMessage.user("hello"), ChatMessage.assistant("echo: hello"))
    assert result.finish_reason is FinishReason.SUCCESS and result.reply_text == "echo: hello"
    assert result.runs == (2 if fault is Fault.BEFORE else 1)
    assert not [r for r in caplog.records if r.exc_info]


def test_a_turn_whose_writes_never_land_finishes_after_its_last_run_saying_so(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "RETRY_WAIT_CAP", 0)
    faults = StoreFaults(lambda call: Fault.BEFORE if call == "sessions.append" else Fault.NONE)
    with open_stores(postgres_url, bot="helper") as stores:
        result, texts = asyncio.run(answered_by_a_worker_on(failing_stores(stores, faults), postgres_url, "hello"))
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
    assert result.runs == MAX_RUNS and len(faults.failed) == MAX_RUNS and history == ()
    assert result.finish_reason is FinishReason.ERROR and result.outcome.writes_lost and texts == ["echo: hello"]
    assert result.error is not None and "was not stored" in result.error


def test_a_turn_that_could_not_read_its_history_is_run_again_instead_of_answering_with_an_apology(postgres_url: str) -> None:
    """An outage during a read: the first run's apology is neither sent nor stored, and the re-run
    answers, stores its exchange once and sends one reply."""
    faults = StoreFaults.first("sessions.recent", Fault.BEFORE)
    with open_stores(postgres_url, bot="helper") as stores:
        result, texts = asyncio.run(answered_by_a_worker_on(failing_stores(stores, faults), postgres_url, "hello"))
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
    assert faults.failed == [("sessions.recent", Fault.BEFORE)]
    assert result.runs == 2 and result.finish_reason is FinishReason.SUCCESS and not result.outcome.fallback
    assert texts == ["echo: hello"] and [f.component for f in result.outcome.failures] == ["inbox"]
    assert history == (ChatMessage.user("hello"), ChatMessage.assistant("echo: hello"))


def test_a_turn_whose_reads_never_succeed_sends_its_apology_on_its_last_run(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never silent: when no run follows, the held-back apology is sent after all, once."""
    monkeypatch.setattr(worker, "RETRY_WAIT_CAP", 0)
    faults = StoreFaults(lambda call: Fault.BEFORE if call == "sessions.recent" else Fault.NONE)
    with open_stores(postgres_url, bot="helper") as stores:
        result, texts = asyncio.run(answered_by_a_worker_on(failing_stores(stores, faults), postgres_url, "hello"))
    assert result.runs == MAX_RUNS and len(faults.failed) == MAX_RUNS
    assert result.outcome.fallback and len(texts) == 1 and texts[0] == result.outcome.outgoing_response.text
    assert any(f.kind is FailureKind.UNAVAILABLE for f in result.outcome.failures)


async def fresh_workers(inbox: Inbox, within: float) -> set[int]:
    """The ids of the workers registered with a heartbeat of the last `within` seconds."""
    async with inbox.connector.pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT id FROM procrastinate_workers WHERE last_heartbeat > now() - make_interval(secs => %s)", (within,))
        ).fetchall()
    return {row[0] for row in rows}


def test_a_worker_whose_heartbeat_was_lost_registers_again_heartbeats_and_takes_work(postgres_url: str) -> None:
    """A heartbeat that fails once the worker runs stops its registration (procrastinate stops
    watching its heartbeat once the periodic deferrer of an app without periodic tasks ends):
    the worker registers anew, heartbeats and answers messages."""
    settings = WorkerSettings(stall_timeout=0.6, poll_interval=0.2)
    llm = ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}")

    async def body(stores: Stores) -> tuple[list[int], set[int], MessageResult]:
        async with open_inbox(postgres_url, bot="helper") as inbox:
            manager = inbox.app.job_manager
            beat, lost = manager.update_heartbeat, list[int]()

            async def beat_lost_once(worker_id: int) -> None:
                if not lost:
                    lost.append(worker_id)
                    raise ConnectorException() from psycopg.OperationalError("server closed the connection unexpectedly")
                await beat(worker_id)

            manager.update_heartbeat = beat_lost_once  # type: ignore[method-assign]
            with standard_pipeline(llm, RecordingChannel(), stores=stores) as pipeline:
                running = asyncio.create_task(run_worker(inbox, pipeline.build(), settings, install_signal_handlers=False))
                try:
                    fresh: set[int] = set()
                    for _ in range(100):  # the new registration comes after one reconnect delay
                        await asyncio.sleep(0.1)
                        fresh = await fresh_workers(inbox, settings.stall_timeout)
                        if lost and fresh - set(lost):
                            break
                    answered = await inbox.wait(await inbox.submit(SESSION, IncomingMessage("hello")), timeout=20)
                    return lost, fresh, answered
                finally:
                    running.cancel()
                    await asyncio.gather(running, return_exceptions=True)

    with open_stores(postgres_url, bot="helper") as stores:
        lost, fresh, answered = asyncio.run(body(stores))
    assert len(lost) == 1 and len(fresh) == 1 and lost[0] not in fresh  # registered anew, the stale registration gone
    assert answered.finish_reason is FinishReason.SUCCESS and answered.reply_text == "echo: hello"


def test_a_worker_says_each_outage_in_one_lost_line_retries_with_rising_capped_delays_and_one_back_line(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two outages (the heartbeat and every check refused as a lost connection): each is one
    `worker.database_lost`, then `worker.database_retrying` once per new delay (rising, and no more
    lines once the delay is capped while the outage lasts), then one `worker.database_back`; no traceback."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(worker, "RECONNECT_FIRST_DELAY", 0.05)
    monkeypatch.setattr(worker, "RECONNECT_MAX_DELAY", 0.2)
    settings = WorkerSettings(stall_timeout=0.6, poll_interval=0.2)
    llm = ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}")
    said = ("worker.database_lost", "worker.database_retrying", "worker.database_back")

    async def body(stores: Stores, logs: list[dict[str, Any]]) -> None:
        async with open_inbox(postgres_url, bot="helper") as inbox:
            manager, down = inbox.app.job_manager, asyncio.Event()
            beat, check = manager.update_heartbeat, inbox.check

            def refused() -> ConnectorException:
                error = ConnectorException()
                error.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
                return error

            async def beat_unless_down(worker_id: int) -> None:
                if down.is_set():
                    raise refused()
                await beat(worker_id)

            async def check_unless_down(timeout: float = 2.0) -> None:
                if down.is_set():
                    raise StoreUnavailableError(f"the inbox at {inbox.url}", "its database cannot be reached") from refused()
                await check(timeout)

            async def lines(event: str, count: int) -> None:
                while sum(e["event"] == event for e in logs) < count:
                    await asyncio.sleep(0.02)

            manager.update_heartbeat = beat_unless_down  # type: ignore[method-assign]
            inbox.check = check_unless_down  # type: ignore[method-assign]
            with standard_pipeline(llm, RecordingChannel(), stores=stores) as pipeline:
                running = asyncio.create_task(run_worker(inbox, pipeline.build(), settings, install_signal_handlers=False))
                try:
                    for outage in (1, 2):
                        await asyncio.sleep(3 * settings.heartbeat_interval)  # the worker has run and heartbeaten
                        down.set()
                        await asyncio.wait_for(lines("worker.database_retrying", 3 * outage), 20)
                        await asyncio.sleep(5 * worker.RECONNECT_MAX_DELAY)  # tries at the capped delay, said no more
                        down.clear()
                        await asyncio.wait_for(lines("worker.database_back", outage), 20)
                    answered = await inbox.wait(await inbox.submit(SESSION, IncomingMessage("hello")), timeout=20)
                    assert answered.reply_text == "echo: hello"
                finally:
                    running.cancel()
                    await asyncio.gather(running, return_exceptions=True)

    with open_stores(postgres_url, bot="helper") as stores, capture_logs() as logs:
        asyncio.run(body(stores, logs))
    changes = [e for e in logs if e["event"] in said]
    assert [e["event"] for e in changes] == [*said[:1], *said[1:2] * 3, *said[2:]] * 2
    for outage in (changes[:5], changes[5:]):
        delays = [e["delay"] for e in outage if e["event"] == "worker.database_retrying"]
        assert all(shorter < longer for shorter, longer in itertools.pairwise(delays)) and delays[-1] <= 1.2 * worker.RECONNECT_MAX_DELAY
    assert not [e for e in logs if "exc_info" in e] and not [r for r in caplog.records if r.exc_info]
