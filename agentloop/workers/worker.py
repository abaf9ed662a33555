"""A worker: runs the turns of a bot's inbox messages, beside any number of other workers,
and runs again the turns of a worker that stopped answering."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections.abc import Callable, Coroutine, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs
import procrastinate
import procrastinate.worker

from agentloop._log import get_logger
from agentloop._signals import stop_on_signals
from agentloop.components import InboxTurn
from agentloop.loop import AgentLoop
from agentloop.mid_turn import MidTurnPolicy
from agentloop.outcome import FailureEvent, FailureKind, FailureSource
from agentloop.workers.errors import TurnNotStoredError
from agentloop.workers.inbox import MAX_RUNS, TURN_TASK, Inbox, is_connection_loss, queue_name

if TYPE_CHECKING:
    from agentloop.notes import IdleSessions

_log = get_logger("agentloop.worker")

RETRY_WAIT_CAP = 30
"""Seconds a failed turn waits at most before its next run (the waits double from one second)."""
RECONNECT_FIRST_DELAY = 0.5
"""Seconds a worker that lost its database waits before its first try to reach it again."""
RECONNECT_MAX_DELAY = 10.0
"""The longest wait between two tries (each doubles the one before, up to this, with jitter)."""


@attrs.frozen
class WorkerSettings:
    """How a worker runs turns and watches the others; every field has a working default.

    A worker heartbeats every `stall_timeout / 6` seconds and checks as often for workers
    that stopped; a worker silent for `stall_timeout` seconds is taken for dead and its
    turns are run again elsewhere, so a lost worker's turns start again within
    `recovery_bound` seconds of its death.
    """

    concurrency: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    """Turns this worker runs at once (each of another session)."""
    stall_timeout: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    """Seconds without a heartbeat after which a worker's turns are run by another."""
    shutdown_grace: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    """On SIGTERM: seconds in-flight turns get to finish before they are handed back to the inbox."""
    poll_interval: float = attrs.field(default=1.0, validator=attrs.validators.gt(0))
    """Seconds between looks at the inbox when no notification came (a fallback: inserts notify)."""

    @property
    def heartbeat_interval(self) -> float:
        return self.stall_timeout / 6

    @property
    def recovery_bound(self) -> float:
        """Seconds after a worker's death by which its turns have started again on another
        (its last heartbeat, the timeout, one check, one poll)."""
        return self.stall_timeout + 2 * self.heartbeat_interval + self.poll_interval


def rerun_failure(run: int, at: datetime) -> FailureEvent:
    """The failure a turn's outcome carries when it is not its message's first run."""
    return FailureEvent(
        FailureSource.SYSTEM,
        "inbox",
        FailureKind.UNKNOWN,
        f"this message's turn was run again (run {run}) after an earlier run was cut off by a lost worker "
        f"or a failure; its history is written and its reply sent at most once",
        at,
    )


_STORE_FAILURES = (FailureKind.EXCEPTION, FailureKind.UNAVAILABLE)


class _Turns:
    """The procrastinate task of a worker: one inbox message's turn through `loop`; the
    session is touched in `idle` (if any) as the turn starts and as it ends."""

    def __init__(self, inbox: Inbox, loop: AgentLoop, idle: IdleSessions | None = None) -> None:
        self.inbox = inbox
        self.loop = loop
        self.idle = idle

    async def run(self, context: procrastinate.JobContext, bot: str, message_id: str) -> None:
        pending = await self.inbox.start_turn(message_id)
        if pending is None:  # its outcome is stored: a job run again after its turn finished
            return
        log = _log.bind(bot=bot, message_id=message_id, session_id=pending.session.id, run=pending.run)
        if self.idle is not None:
            self.idle.touch(pending.session)
        outcome = None
        turn = InboxTurn(message_id, pending.run, self.inbox, last_run=context.job.attempts >= MAX_RUNS - 1)
        job_id, interrupt = context.job.id, self.inbox.mid_turn is MidTurnPolicy.INTERRUPT  # under interrupt, a newer message stops it
        newer = self.inbox.interruption(pending.session.id, job_id) if interrupt and job_id is not None else None
        try:  # the message id names the turn: feedback on it reaches its notes
            ctx = await self.loop.run_turn(pending.session, pending.incoming, components=(turn,), turn_id=message_id, interruption=newer)
            outcome = ctx.turn_outcome
            if outcome is not None and pending.run > 1:
                outcome = attrs.evolve(outcome, failures=(rerun_failure(pending.run, self.loop.clock.now()), *outcome.failures))
                log.warning("worker.turn_rerun")
            held = outcome is not None and turn.runs_again(outcome, outcome.failures)
            if outcome is not None and (outcome.writes_lost or held):  # I15: not finished; the retry's keyed writes land once
                failed = [f"{f.component}: {f.message}" for f in outcome.failures if f.kind in _STORE_FAILURES]
                raise TurnNotStoredError(message_id, "; ".join(failed))
        except Exception as error:
            text = f"{type(error).__name__}: {error}"
            if isinstance(error, TurnNotStoredError):  # expected while a store is away: said in one line, run again
                log.warning("worker.turn_not_stored", error=str(error))
            else:
                log.error("worker.turn_failed", exc_info=error)
            if context.job.attempts >= MAX_RUNS - 1:
                await self.inbox.finish_turn(message_id, outcome, error=text)
            else:
                await self.inbox.record_error(message_id, text)
            if self.idle is not None:
                self.idle.touch(pending.session, success=False)
            raise
        if self.idle is not None:  # a session whose last answer was the fallback ends unsuccessful
            self.idle.touch(pending.session, success=outcome is not None and not outcome.fallback)
        await self.inbox.finish_turn(message_id, outcome)


class TurnBackoff(procrastinate.BaseRetryStrategy):
    """When a turn's run fails, run it again after 1, 2, 4... seconds, at most `RETRY_WAIT_CAP`,
    until its message has had `MAX_RUNS` runs (a database outage is waited out, not hammered)."""

    def get_retry_decision(self, *, exception: BaseException, job: procrastinate.jobs.Job) -> procrastinate.RetryDecision | None:
        if job.attempts >= MAX_RUNS - 1:
            return None
        return procrastinate.RetryDecision(retry_in={"seconds": min(RETRY_WAIT_CAP, 2**job.attempts)})


async def reclaim_stalled(inbox: Inbox, stall_timeout: float) -> int:
    """Hand back to the inbox the turns of `inbox.bot` held by workers silent for `stall_timeout`
    seconds; returns how many. One process at a time does it (an advisory lock), so a turn
    another worker has just taken again is never taken from it."""
    reclaimed = 0
    async with inbox.connector.pool.connection() as conn:
        got = await (await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (f"reclaim {queue_name(inbox.bot)}",))).fetchone()
        if not got or not got[0]:
            return 0
        try:
            for job in await inbox.app.job_manager.get_stalled_jobs(
                queue=queue_name(inbox.bot), task_name=TURN_TASK, seconds_since_heartbeat=stall_timeout
            ):
                await inbox.app.job_manager.retry_job(job)
                reclaimed += 1
                _log.warning("worker.turn_reclaimed", bot=inbox.bot, job_id=job.id, message_id=job.task_kwargs.get("message_id"))
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"reclaim {queue_name(inbox.bot)}",))
    return reclaimed


async def _watch(inbox: Inbox, settings: WorkerSettings) -> None:
    """Reclaim stalled turns every heartbeat interval until cancelled; a failed pass is logged and retried.

    It reclaims only once the database has answered it promptly for `stall_timeout`
    seconds: after an outage, even one shorter than a call's wait for a connection, every
    worker's heartbeat is as old as the outage, and the workers still running must have
    had the time to send one again.
    """
    reachable_since: float | None = time.monotonic() - settings.stall_timeout  # just connected: nothing to wait for
    while True:
        await asyncio.sleep(settings.heartbeat_interval)
        try:
            asked = time.monotonic()
            await inbox.check()
            if reachable_since is None or time.monotonic() - asked > settings.heartbeat_interval:  # back, or slow to answer
                reachable_since = time.monotonic()
            if time.monotonic() - reachable_since >= settings.stall_timeout:
                await reclaim_stalled(inbox, settings.stall_timeout)
        except Exception as error:
            if is_connection_loss(error):
                reachable_since = None
            _log.warning("worker.reclaim_failed", bot=inbox.bot, error=str(error))


async def run_worker(
    inbox: Inbox,
    loop: AgentLoop,
    settings: WorkerSettings | None = None,
    *,
    install_signal_handlers: bool = True,
    idle: IdleSessions | None = None,
) -> None:
    """Run the turns of `inbox`'s messages through `loop` until stopped.

    SIGTERM or SIGINT (with `install_signal_handlers`), or cancelling this coroutine,
    stops taking messages, lets in-flight turns finish for `shutdown_grace` seconds and
    hands any still running back to the inbox for another worker. With `idle`, the
    sessions this worker runs turns of are ended (distilled) once idle, while it runs.
    When the database goes away the worker waits for it (with capped backoff) and takes
    work again, registered anew, once it is back; an error that is not the database being
    out of reach (a schema this release does not know, say) ends it.
    """
    settings = settings or WorkerSettings()
    turns = _Turns(inbox, loop, idle)
    inbox.app.task(
        name=TURN_TASK, pass_context=True, retry=TurnBackoff()
    )(turns.run)
    watcher = asyncio.create_task(_watch(inbox, settings), name="agentloop reclaim stalled turns")
    if idle is not None:
        idle.start()
    stop = asyncio.Event()
    name = f"{socket.gethostname()}:{os.getpid()}"
    try:
        with stop_on_signals(stop) if install_signal_handlers else contextlib.nullcontext(), _quiet_procrastinate(name):
            await _supervise(inbox, settings, name, stop)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        if idle is not None:
            await idle.stop()


async def _supervise(inbox: Inbox, settings: WorkerSettings, name: str, stop: asyncio.Event) -> None:
    """Run procrastinate workers one after another: a new one (a new registration, heartbeat
    and LISTEN) each time the last died of a lost database and the database is back."""
    while True:
        worker = _Worker(
            inbox.app,
            queues=[queue_name(inbox.bot)],
            name=name,
            concurrency=settings.concurrency,
            update_heartbeat_interval=settings.heartbeat_interval,
            stalled_worker_timeout=settings.stall_timeout,
            shutdown_graceful_timeout=settings.shutdown_grace,
            fetch_job_polling_interval=settings.poll_interval,
            install_signal_handlers=False,
            delete_jobs="successful",
        )
        cause: BaseException | None = None
        try:
            pruned = await _run_until(worker, inbox, settings.heartbeat_interval, stop)
        except Exception as error:
            if not is_connection_loss(error):
                raise
            cause, pruned = error, False
        if stop.is_set():
            return
        if pruned:
            _log.warning("worker.registration_lost", bot=inbox.bot, worker_id=worker.worker_id)
            continue
        # it died of a lost connection, or a side task (heartbeat, LISTEN) failed and stopped it
        lost_at = time.monotonic()
        cause = cause or worker.side_task_error
        if cause is not None and not is_connection_loss(cause):
            raise cause
        _log.warning("worker.database_lost", bot=inbox.bot, error=_one_line(cause) if cause else "a side task stopped")
        if not await _reconnect(inbox, stop):
            return
        if worker.worker_id is not None:  # its turns (all ended by now) are left to reclaim at once
            with contextlib.suppress(Exception):
                await inbox.app.job_manager.unregister_worker(worker.worker_id)
        _log.warning("worker.database_back", bot=inbox.bot, down_for=round(time.monotonic() - lost_at, 1))


class _Worker(procrastinate.worker.Worker):
    """procrastinate's worker, stopped whenever one of its side tasks (heartbeat, LISTEN) fails.

    procrastinate's own watch ends once any side task returns, and its periodic deferrer
    returns at once when there is no periodic task, so a heartbeat or LISTEN lost later was
    never noticed: the worker kept taking turns unheard, its registration going stale.
    """

    side_task_error: BaseException | None = None
    """The failure of the side task that stopped this worker, if one did."""

    async def _monitor_side_tasks(self, side_tasks: list[asyncio.Task[Any]]) -> None:
        """Stop the worker at the first side task that fails; one that ends cleanly is let go."""
        pending = set(side_tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            failed = [task.exception() for task in done if not task.cancelled() and task.exception() is not None]
            if failed:
                self.side_task_error = failed[0]
                self.stop_unheard()
                return

    def stop_unheard(self) -> None:
        """Stop a worker whose heartbeat no longer reaches the database: its turns in flight are
        run again elsewhere after `stall_timeout` seconds, so they get no longer than that here."""
        grace = self.shutdown_graceful_timeout
        self.shutdown_graceful_timeout = self.stalled_worker_timeout if grace is None else min(grace, self.stalled_worker_timeout)
        halt: Callable[[], None] = self.stop  # procrastinate leaves it unannotated
        halt()


async def _run_until(worker: _Worker, inbox: Inbox, interval: float, stop: asyncio.Event) -> bool:
    """Run `worker` until it ends or `stop` is set (then it stops after its turns in flight);
    True when it was stopped because its registration vanished (another worker pruned it
    as stalled after an outage), so it must register again."""
    run: Callable[[], Coroutine[Any, Any, None]] = worker.run  # procrastinate leaves these two unannotated
    halt: Callable[[], None] = worker.stop
    running = asyncio.create_task(run(), name="procrastinate worker")
    stopping = asyncio.create_task(stop.wait(), name="agentloop worker stop")
    pruned = asyncio.create_task(_registration_gone(worker, inbox, interval), name="agentloop worker registration")
    try:
        await asyncio.wait((running, stopping, pruned), return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            halt()
        elif pruned.done():
            worker.stop_unheard()
        try:
            await running
        except Exception as error:
            if not (stop.is_set() and is_connection_loss(error)):  # stopping with the database gone: nothing to tell it
                raise
        return pruned.done() and not pruned.cancelled() and pruned.exception() is None
    finally:
        stopping.cancel()
        pruned.cancel()
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)


async def _registration_gone(worker: _Worker, inbox: Inbox, interval: float) -> None:
    """Return once `worker`'s row in procrastinate_workers is gone; a failed look is tried again."""
    while True:
        await asyncio.sleep(interval)
        if worker.worker_id is None:
            continue
        with contextlib.suppress(Exception):
            async with inbox.connector.pool.connection() as conn:
                found = await (await conn.execute("SELECT 1 FROM procrastinate_workers WHERE id = %s", (worker.worker_id,))).fetchone()
            if found is None:
                return


async def _reconnect(inbox: Inbox, stop: asyncio.Event) -> bool:
    """Wait until the inbox's database answers (True) or `stop` is set (False), trying after
    delays that double from `RECONNECT_FIRST_DELAY` up to `RECONNECT_MAX_DELAY`, with jitter."""
    delay, announced = RECONNECT_FIRST_DELAY, 0.0
    while True:
        pause = delay * random.uniform(0.8, 1.2)
        if delay != announced:  # one line per new delay, not one per try
            _log.info("worker.database_retrying", bot=inbox.bot, delay=round(pause, 2))
            announced = delay
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), pause)
        if stop.is_set():
            return False
        try:
            await inbox.check()
        except Exception as error:
            if not is_connection_loss(error):
                raise
        else:
            return True
        delay = min(delay * 2, RECONNECT_MAX_DELAY)


class _ConnectionLossFilter(logging.Filter):
    """Drops the records of errors caused by a lost database, and the pool's warnings of failed
    connection attempts: the worker says what happens in one line per change. A turn whose
    writes did not land keeps procrastinate's line of its retry, without the traceback (the
    worker has said why)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "psycopg.pool":
            return record.levelno > logging.WARNING
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, TurnNotStoredError):
            record.exc_info, record.exc_text = None, None
            return True
        return error is None or not is_connection_loss(error)


@contextlib.contextmanager
def _quiet_procrastinate(name: str) -> Iterator[None]:
    """Keep procrastinate's and the pool's tracebacks of a lost database out of the log while the worker runs."""
    quiet = _ConnectionLossFilter()
    names = (f"procrastinate.worker.{name}", "procrastinate.worker", "procrastinate.utils", "psycopg.pool", "asyncio")
    loggers = [logging.getLogger(logger) for logger in names]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def _one_line(error: BaseException) -> str:
    cause = error.__cause__ or error
    return " ".join(str(cause).split()) or type(cause).__name__
