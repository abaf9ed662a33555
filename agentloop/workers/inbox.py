"""A bot's durable inbox in PostgreSQL: each submitted message is a procrastinate job,
the jobs of one session run one at a time in submission order, and a message stays
until its turn has finished and its outcome is stored for the submitter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, LiteralString

import attrs
import procrastinate
import psycopg
from procrastinate.schema import SchemaManager
from psycopg.types.json import Jsonb

from agentloop._log import get_logger
from agentloop._names import check_bot_name, check_message_id, new_id
from agentloop._text import storable
from agentloop.adapters.urls import is_postgres_url, shown_url
from agentloop.context import IncomingMessage, Session
from agentloop.adapters.errors import NewerSchemaError
from agentloop.errors import StoreUnavailableError, TurnInProgressError
from agentloop.mid_turn import Interruption, MidTurnPolicy
from agentloop.outcome import FinishReason, TurnOutcome, converter
from agentloop.workers.errors import InboxUrlError, MessageIdConflictError, MessageNotAnsweredError, UnknownMessageError

TURN_TASK = "agentloop.turn"
"""The procrastinate task every inbox message is a job of."""

MAX_RUNS = 5
"""Runs of one message before it is given up, so a turn that keeps failing stops holding its session."""

CONNECTION_WAIT = 5.0
"""Seconds a call waits for a connection before it says the database cannot be reached."""

RECONNECT_WINDOW = 2.0
"""Seconds the pool keeps retrying a lost connection before leaving it to the next call, so
the first call after the database is back connects at once instead of after a long backoff."""

_log = get_logger("agentloop.inbox")

# One advisory-lock key for creating the inbox schema, so workers starting together take turns.
_MIGRATION_LOCK = 0x6167_6C6F_6F70_0001

_STEPS: tuple[LiteralString, ...] = (
    # 1: the messages, and a wake-up for the workers when a session's job leaves `doing`
    # (finished, deleted or handed back): procrastinate notifies only inserted jobs, so
    # without it the session's next message would wait for the workers' next poll.
    """
    CREATE TABLE agentloop_inbox (
        bot text NOT NULL,
        message_id text NOT NULL,
        session jsonb NOT NULL,
        message jsonb NOT NULL,
        job_id bigint,
        submitted_at timestamptz NOT NULL DEFAULT now(),
        runs integer NOT NULL DEFAULT 0,
        started_at timestamptz,
        delivered_at timestamptz,
        delivered_by_run integer,
        finished_at timestamptz,
        outcome jsonb,
        error text,
        PRIMARY KEY (bot, message_id)
    );
    CREATE FUNCTION agentloop_inbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('procrastinate_queue_v1#' || OLD.queue_name,
                          json_build_object('type', 'job_inserted', 'job_id', OLD.id)::text);
        RETURN NULL;
    END;
    $$;
    CREATE TRIGGER agentloop_inbox_wake_on_update AFTER UPDATE OF status ON procrastinate_jobs
        FOR EACH ROW WHEN (OLD.status = 'doing' AND NEW.status <> 'doing' AND OLD.lock IS NOT NULL
                           AND OLD.queue_name LIKE 'agentloop.%')
        EXECUTE FUNCTION agentloop_inbox_wake();
    CREATE TRIGGER agentloop_inbox_wake_on_delete AFTER DELETE ON procrastinate_jobs
        FOR EACH ROW WHEN (OLD.status = 'doing' AND OLD.lock IS NOT NULL AND OLD.queue_name LIKE 'agentloop.%')
        EXECUTE FUNCTION agentloop_inbox_wake();
    """,
    # 2: message ids are the client's, within its tenant chain and user (`scope`): two tenants may
    # use the same id and neither learns of the other's. A message is known by its `key` in the
    # inbox (its job's argument); rows kept from before keep their id as their key, so their jobs run.
    """
    ALTER TABLE agentloop_inbox ADD COLUMN scope jsonb, ADD COLUMN key text;
    UPDATE agentloop_inbox SET key = message_id,
        scope = jsonb_build_array(session -> 'org_id', session -> 'team_id', session -> 'project_id', session -> 'user_id');
    ALTER TABLE agentloop_inbox ALTER COLUMN scope SET NOT NULL, ALTER COLUMN key SET NOT NULL,
        DROP CONSTRAINT agentloop_inbox_pkey, ADD PRIMARY KEY (bot, key),
        ADD CONSTRAINT agentloop_inbox_scoped_id UNIQUE (bot, scope, message_id);
    """,
    # 3: a session's unfinished messages in job order, found at once: what a running turn asks at each
    # safe point under the interrupt policy, and what a submit looks for under the reject policy.
    """
    CREATE INDEX agentloop_inbox_unfinished ON agentloop_inbox (bot, (session ->> 'id'), job_id) WHERE finished_at IS NULL;
    """,
)
SCHEMA_VERSION = len(_STEPS)


def queue_name(bot: str) -> str:
    """The procrastinate queue of `bot`'s messages: its workers take jobs from it alone."""
    return f"agentloop.{bot}"


def is_connection_loss(error: BaseException) -> bool:
    """Whether `error`, or an error that caused it, is the database being out of reach (down,
    restarting, cut off) rather than a fault of a query or the schema."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, (psycopg.OperationalError, OSError)):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def message_scope(session: Session) -> list[str | None]:
    """The namespace of a session's message ids: its tenant chain and user (org, team, project, user)."""
    return [session.org_id, session.team_id, session.project_id, session.user_id]


def _storable(value: Any) -> Any:
    """`value` (unstructured JSON) with NUL and lone surrogates in its strings replaced, which JSONB cannot hold."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(name): _storable(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value


def session_lock(bot: str, session_id: str) -> str:
    """The procrastinate lock of one session: its jobs run one at a time, oldest first."""
    return f"agentloop.{bot}.session.{session_id}"


@attrs.frozen
class MessageResult:
    """How the turn of a submitted message ended, as its submitter sees it.

    `outcome` is the finished turn's `TurnOutcome` (None when the pipeline wrote none, or
    when every run failed: then `error` says why); `runs` counts the times the turn was
    started, more than 1 when a worker was lost or a run failed.
    """

    message_id: str
    outcome: TurnOutcome | None
    runs: int
    error: str | None = None

    @property
    def finish_reason(self) -> FinishReason | None:
        return None if self.outcome is None else self.outcome.finish_reason

    @property
    def reply_text(self) -> str | None:
        """The text that was to be sent to the user (a fallback text included)."""
        response = None if self.outcome is None else self.outcome.outgoing_response
        return None if response is None else response.text


@attrs.frozen
class PendingTurn:
    """A message a worker is about to run: its session, its message and which run this is."""

    message_id: str
    session: Session
    incoming: IncomingMessage
    run: int


class Inbox:
    """The inbox of one bot: submit messages, await their outcomes; workers take the turns.

    Open it with `open_inbox`. Every method is a coroutine on one connection pool. The
    `message_id` the methods after `submit` take is the message's key in the inbox (what
    `submit` returns, and its job's argument), not the client's id. `mid_turn` is the bot's
    policy for a message submitted while another of its session is unfinished: under reject,
    `submit` refuses it; under interrupt, workers give turns a look for a newer message.
    """

    def __init__(
        self, app: procrastinate.App, connector: procrastinate.PsycopgConnector, bot: str, url: str,
        mid_turn: MidTurnPolicy = MidTurnPolicy.QUEUE,
    ) -> None:
        self.app = app
        self.mid_turn = mid_turn
        self.bot = bot
        self.url = url
        """The inbox URL with any password masked."""
        self.connector = connector

    async def submit(self, session: Session, message: IncomingMessage, *, message_id: str | None = None) -> str:
        """Keep `message` for `session` until a worker has answered it; returns its key in the
        inbox, what `result` and `wait` take.

        `message_id` (`MESSAGE_ID_RULE`, else ValueError) is the client's name for it, one
        namespace per tenant chain and user: submitting the same id again from that scope
        (a client retrying) stores nothing new and returns the same key; with another session
        or text it raises `MessageIdConflictError`. NUL and lone surrogates in the message are
        replaced by U+FFFD before it is stored. The message and its job are stored in one
        transaction, so both or neither exist. Under the reject policy, a new message of a session
        with an unfinished one raises `TurnInProgressError` (one submit of a session at a time decides).
        """
        if message_id is None:
            message_id = new_id()
        check_message_id(message_id)
        key = new_id()
        session = converter.structure(_storable(converter.unstructure(session)), Session)  # its id names its lock too
        scope = Jsonb(message_scope(session))
        session_json, message_json = Jsonb(converter.unstructure(session)), Jsonb(_storable(converter.unstructure(message)))
        with self._reachable():
            return await self._submit(session, key, scope, message_id, session_json, message_json)

    async def _submit(self, session: Session, key: str, scope: Jsonb, message_id: str, session_json: Jsonb, message_json: Jsonb) -> str:
        """Store the message as `key` with its job in one transaction; the key already stored
        for the same `message_id` in `scope` if it is the same message."""
        async with self.connector.pool.connection() as conn, conn.transaction():
            if self.mid_turn is MidTurnPolicy.REJECT:
                await self._refuse_if_busy(conn, session.id, scope, message_id)
            inserted = await (
                await conn.execute(
                    "INSERT INTO agentloop_inbox (bot, key, scope, message_id, session, message) VALUES (%s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING 1",
                    (self.bot, key, scope, message_id, session_json, message_json),
                )
            ).fetchone()
            if inserted is None:
                same = await (
                    await conn.execute(
                        "SELECT key, session = %s AND message = %s FROM agentloop_inbox WHERE bot = %s AND scope = %s AND message_id = %s",
                        (session_json, message_json, self.bot, scope, message_id),
                    )
                ).fetchone()
                if same is None or not same[1]:
                    raise MessageIdConflictError(self.bot, message_id)
                existing: str = same[0]
                return existing
            job_id = await self.app.configure_task(
                TURN_TASK, queue=queue_name(self.bot), lock=session_lock(self.bot, session.id), connection=conn
            ).defer_async(bot=self.bot, message_id=key)
            await conn.execute("UPDATE agentloop_inbox SET job_id = %s WHERE bot = %s AND key = %s", (job_id, self.bot, key))
        _log.debug("inbox.submitted", bot=self.bot, message_id=message_id, key=key, session_id=session.id, job_id=job_id)
        return key

    async def _refuse_if_busy(self, conn: psycopg.AsyncConnection[Any], session_id: str, scope: Jsonb, message_id: str) -> None:
        """Raise `TurnInProgressError` if another message of the session is unfinished (the client's retry of the
        same one is not another), holding the session's submit lock until the transaction ends."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (session_lock(self.bot, session_id),))
        busy = await (
            await conn.execute(
                "SELECT 1 FROM agentloop_inbox WHERE bot = %s AND session ->> 'id' = %s AND finished_at IS NULL "
                "AND NOT (scope = %s AND message_id = %s) LIMIT 1",
                (self.bot, session_id, scope, message_id),
            )
        ).fetchone()
        if busy is not None:
            raise TurnInProgressError(session_id)

    def interruption(self, session_id: str, job_id: int) -> Interruption:
        """What the turn of job `job_id` asks at each safe point: is a newer message of its session unfinished?"""

        async def newer() -> bool:
            found = await self._execute(
                "SELECT EXISTS (SELECT 1 FROM agentloop_inbox WHERE bot = %s AND session ->> 'id' = %s "
                "AND finished_at IS NULL AND job_id > %s)",
                (self.bot, session_id, job_id),
            )
            return found is not None and bool(found[0])

        return Interruption(newer)

    async def result(self, message_id: str) -> MessageResult | None:
        """The result of `message_id` once its turn has finished, None before;
        `UnknownMessageError` if it was never submitted. Like every call here, it raises
        `StoreUnavailableError` within `CONNECTION_WAIT` seconds while the database cannot be reached."""
        row = await self._fetch("SELECT finished_at IS NOT NULL, outcome, runs, error", message_id)
        if row is None:
            raise UnknownMessageError(self.bot, message_id)
        finished, outcome, runs, error = row
        if not finished:
            return None
        return MessageResult(message_id, None if outcome is None else converter.structure(outcome, TurnOutcome), runs, error)

    async def wait(self, message_id: str, *, timeout: float = 60.0) -> MessageResult:
        """The result of `message_id`, waiting up to `timeout` seconds for its turn to finish
        (polling, 5 ms at first and backing off to 200 ms); `MessageNotAnsweredError` after."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        while (found := await self.result(message_id)) is None:
            if time.monotonic() >= deadline:
                row = await self._fetch("SELECT runs, error", message_id)
                runs, error = row if row is not None else (0, None)
                raise MessageNotAnsweredError(message_id, timeout, runs, error)
            await asyncio.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.2)
        return found

    async def claim_delivery(self, message_id: str, attempt: int) -> bool:
        """Record that run `attempt` sends the reply to `message_id`; False if another run claimed it (at most once)."""
        claimed = await self._execute(
            "UPDATE agentloop_inbox SET delivered_at = now(), delivered_by_run = %s "
            "WHERE bot = %s AND key = %s AND (delivered_at IS NULL OR delivered_by_run = %s) RETURNING 1",
            (attempt, self.bot, message_id, attempt),
        )
        return claimed is not None

    async def start_turn(self, message_id: str) -> PendingTurn | None:
        """For workers: count a run of `message_id` and return what to run, or None when
        its turn already finished (a job run again after its outcome was stored)."""
        row = await self._execute(
            "UPDATE agentloop_inbox SET runs = runs + 1, started_at = now() "
            "WHERE bot = %s AND key = %s AND finished_at IS NULL RETURNING session, message, runs",
            (self.bot, message_id),
        )
        if row is None:
            return None
        session, message, runs = row
        return PendingTurn(message_id, converter.structure(session, Session), converter.structure(message, IncomingMessage), runs)

    async def finish_turn(self, message_id: str, outcome: TurnOutcome | None, *, error: str | None = None) -> None:
        """For workers: store how the turn of `message_id` ended, which releases its submitter's wait."""
        stored = None if outcome is None else Jsonb(converter.unstructure(outcome))
        await self._execute(
            "UPDATE agentloop_inbox SET finished_at = now(), outcome = %s, error = %s WHERE bot = %s AND key = %s",
            (stored, error, self.bot, message_id),
        )

    async def record_error(self, message_id: str, error: str) -> None:
        """For workers: note why a run failed; the message stays for the next run."""
        await self._execute(
            "UPDATE agentloop_inbox SET error = %s WHERE bot = %s AND key = %s", (error, self.bot, message_id)
        )

    async def check(self, timeout: float = 2.0) -> None:
        """Raise `StoreUnavailableError` unless the inbox's database answers within `timeout` seconds."""
        with self._reachable():
            async with self.connector.pool.connection(timeout=timeout) as conn:
                await asyncio.wait_for(conn.execute("SELECT 1"), timeout)

    async def _fetch(self, select: LiteralString, message_id: str) -> tuple[Any, ...] | None:
        return await self._execute(select + " FROM agentloop_inbox WHERE bot = %s AND key = %s", (self.bot, message_id))

    async def _execute(self, query: LiteralString, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Run `query` on a pooled connection; its first row when it returns rows, else None."""
        with self._reachable():
            async with self.connector.pool.connection() as conn:
                cursor = await conn.execute(query, params)
                return await cursor.fetchone() if cursor.description is not None else None

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        """Turn the database being out of reach into `StoreUnavailableError`, in one line."""
        try:
            yield
        except Exception as error:
            if not is_connection_loss(error):
                raise
            reason = " ".join(str(error.__cause__ or error).split()) or type(error).__name__
            raise StoreUnavailableError(f"the inbox at {self.url}", f"its database cannot be reached ({shown_url(reason)})") from error


async def migrate_inbox(url: str) -> None:
    """Create (or bring up to date) the inbox tables and procrastinate's schema at `url`.

    Idempotent and safe to run from several processes at once; a database whose inbox
    schema is newer than this agentloop knows is refused with `NewerSchemaError`.
    procrastinate's own schema is created when absent; upgrading an existing one is
    procrastinate's migrations' job (docs/deploy.md).
    """
    async with await _connect(url) as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        if (await (await conn.execute("SELECT to_regclass('procrastinate_jobs')")).fetchone() or (None,))[0] is None:
            await conn.execute(SchemaManager.get_schema())
        await conn.execute("CREATE TABLE IF NOT EXISTS agentloop_inbox_schema (version integer NOT NULL)")
        found = (await (await conn.execute("SELECT max(version) FROM agentloop_inbox_schema")).fetchone() or (None,))[0]
        version = found or 0
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(shown_url(url), "inbox", version, SCHEMA_VERSION)
        for step in _STEPS[version:]:
            await conn.execute(step)
        if version < SCHEMA_VERSION:
            await conn.execute("DELETE FROM agentloop_inbox_schema")
            await conn.execute("INSERT INTO agentloop_inbox_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
            _log.info("inbox.migrated", url=shown_url(url), version=SCHEMA_VERSION, previous=version)


async def _connect(url: str) -> psycopg.AsyncConnection[tuple[Any, ...]]:
    """One connection to `url`, or a one-line `InboxUrlError` when it is no PostgreSQL URL or unreachable."""
    if not is_postgres_url(url):
        raise InboxUrlError(shown_url(url), "the inbox needs PostgreSQL")
    try:
        return await psycopg.AsyncConnection.connect(url, connect_timeout=10, autocommit=True)
    except psycopg.Error as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise InboxUrlError(shown_url(url), f"PostgreSQL did not accept the connection ({reason})") from error


@asynccontextmanager
async def open_inbox(
    url: str, *, bot: str = "bot", pool_size: int = 4, migrate: bool = True, mid_turn: MidTurnPolicy | str = MidTurnPolicy.QUEUE
) -> AsyncIterator[Inbox]:
    """The inbox of `bot` in the PostgreSQL database at `url`, open for the block.

    With `migrate` (the default) its tables are created or brought up to date first.
    `pool_size` is the most connections it holds at once; `mid_turn` is the bot's mid-turn policy
    (the server submitting and the workers running turns give the same).
    """
    policy = MidTurnPolicy(mid_turn)
    check_bot_name(bot)
    if migrate:
        await migrate_inbox(url)
    else:
        await (await _connect(url)).close()
    # procrastinate's pool checks each connection before lending it, so one the server dropped is replaced
    connector = procrastinate.PsycopgConnector(
        conninfo=url, min_size=1, max_size=max(pool_size, 2), timeout=CONNECTION_WAIT,
        reconnect_timeout=RECONNECT_WINDOW, kwargs={"connect_timeout": round(CONNECTION_WAIT)},
    )
    app = procrastinate.App(connector=connector)
    async with app.open_async():
        yield Inbox(app, connector, bot, shown_url(url), policy)

