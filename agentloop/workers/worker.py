"""A worker: runs the turns of a bot's inbox messages, beside any number of other workers,
and runs again the turns of a worker that stopped answering."""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import datetime
from typing import TYPE_CHECKING

import attrs
import procrastinate
import structlog

from agentloop.components import InboxTurn
from agentloop.loop import AgentLoop
from agentloop.outcome import FailureEvent, FailureKind, FailureSource
from agentloop.workers.errors import TurnNotStoredError
from agentloop.workers.inbox import MAX_RUNS, TURN_TASK, Inbox, queue_name

if TYPE_CHECKING:
    from agentloop.notes import IdleSessions

_log = structlog.get_logger("agentloop.worker")

RETRY_WAIT_CAP = 30
"""Seconds a failed turn waits at most before its next run (the waits double from one second)."""


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
        try:
            ctx = await self.loop.run_turn(  # the message id names the turn: feedback on it reaches its notes
                pending.session, pending.incoming, components=(InboxTurn(message_id, pending.run, self.inbox),),
                turn_id=message_id,
            )
            outcome = ctx.turn_outcome
            if outcome is not None and pending.run > 1:
                outcome = attrs.evolve(outcome, failures=(rerun_failure(pending.run, self.loop.clock.now()), *outcome.failures))
                log.warning("worker.turn_rerun")
            if outcome is not None and outcome.writes_lost:  # I15: not finished; the retry's keyed writes land once
                failed = [f"{f.component}: {f.message}" for f in outcome.failures if f.kind is FailureKind.EXCEPTION]
                raise TurnNotStoredError(message_id, "; ".join(failed))
        except Exception as error:
            text = f"{type(error).__name__}: {error}"
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
    """Reclaim stalled turns every heartbeat interval until cancelled; a failed pass is logged and retried."""
    while True:
        await asyncio.sleep(settings.heartbeat_interval)
        try:
            await reclaim_stalled(inbox, settings.stall_timeout)
        except Exception as error:
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
    """
    settings = settings or WorkerSettings()
    turns = _Turns(inbox, loop, idle)
    inbox.app.task(
        name=TURN_TASK, pass_context=True, retry=TurnBackoff()
    )(turns.run)
    watcher = asyncio.create_task(_watch(inbox, settings), name="agentloop reclaim stalled turns")
    if idle is not None:
        idle.start()
    try:
        await inbox.app.run_worker_async(
            queues=[queue_name(inbox.bot)],
            name=f"{socket.gethostname()}:{os.getpid()}",
            concurrency=settings.concurrency,
            update_heartbeat_interval=settings.heartbeat_interval,
            stalled_worker_timeout=settings.stall_timeout,
            shutdown_graceful_timeout=settings.shutdown_grace,
            fetch_job_polling_interval=settings.poll_interval,
            install_signal_handlers=install_signal_handlers,
            delete_jobs="successful",
        )
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        if idle is not None:
            await idle.stop()
