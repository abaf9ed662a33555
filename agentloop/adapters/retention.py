"""`prune_stores(url, ...)`: apply a `Retention` to a bot's stores at a URL, whichever backend
holds them; `prune_periodically` does it on a schedule (workers and serve); `prune_in_memory`
does it to the in-memory stores that grow (usage, summaries)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from agentloop._log import get_logger
from agentloop._names import check_bot_name
from agentloop.adapters.errors import StoreUrlError
from agentloop.adapters.stores import _postgres_backend, _sqlite_directory
from agentloop.adapters.summaries import InMemorySummaryStore
from agentloop.adapters.urls import is_postgres_url, shown_url
from agentloop.adapters.usage import MemoryUsageStore
from agentloop.errors import StoreError
from agentloop.ports.stores import Stores
from agentloop.retention import PruneReport, Retention

_log = get_logger("agentloop.retention")


def prune_stores(
    url: str | os.PathLike[str],
    *,
    bot: str = "bot",
    retention: Retention,
    now: datetime | None = None,
    compact: bool = True,
    vectors: bool = False,
) -> PruneReport:
    """Delete from `bot`'s stores at `url` what `retention` lets go as of `now` (default: the
    current time), then compact them unless `compact` is false (SQLite: FTS5 optimize and
    VACUUM; PostgreSQL: VACUUM, not FULL). `vectors` rebuilds the vector indexes too (SQLite:
    the index files are dropped and rebuilt at the next open, so stop the bot first;
    PostgreSQL: REINDEX CONCURRENTLY). Safe while the bot runs otherwise; on PostgreSQL one
    prune of a bot runs at a time across processes (a second one returns an empty report)."""
    check_bot_name(bot)
    if is_postgres_url(url):
        report: PruneReport = _postgres_backend(os.fspath(url)).prune_postgres(
            os.fspath(url), bot=bot, retention=retention, now=now, compact=compact, vectors=vectors
        )
        return report
    from agentloop.adapters.sqlite.retention import prune_sqlite

    directory = _sqlite_directory(url, create=False)
    if not (directory / f"{bot}.sqlite3").exists():
        raise StoreUrlError(shown_url(os.fspath(url)), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
    return prune_sqlite(directory, bot=bot, retention=retention, now=now, compact=compact, vectors=vectors)


def prune_in_memory(stores: Stores, retention: Retention, *, now: datetime | None = None) -> PruneReport:
    """Apply `retention` to those of `stores` kept in this process's memory that grow with use:
    usage (rolled up by day) and summaries."""
    now = now or datetime.now(UTC)
    deleted: dict[str, int] = {}
    rolled = 0
    usage_before = retention.before("usage_days", now)
    if isinstance(stores.usage, MemoryUsageStore) and usage_before is not None:
        deleted["usage"], rolled = stores.usage.roll_up(usage_before)
    summaries_before = retention.before("summaries_days", now)
    if isinstance(stores.summaries, InMemorySummaryStore) and summaries_before is not None:
        deleted["summaries"] = stores.summaries.prune(summaries_before)
    return PruneReport(deleted, rolled)


async def prune_periodically(
    url: str,
    *,
    bot: str,
    retention: Retention,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    on_report: Callable[[PruneReport], object] | None = None,
) -> None:
    """Prune `bot`'s stores at `url` now and then every `retention.every_minutes`, until
    cancelled; a prune that fails is logged and tried again at the next time (the bot keeps running)."""
    while True:
        try:
            report = await asyncio.to_thread(prune_stores, url, bot=bot, retention=retention, now=clock())
        except (OSError, StoreError, StoreUrlError) as error:
            _log.warning("stores.prune_failed", bot=bot, stores=shown_url(url), reason=str(error))
        else:
            if on_report is not None:
                on_report(report)
        await sleep(retention.every_minutes * 60.0)


@contextlib.asynccontextmanager
async def pruning(url: str, *, bot: str, retention: Retention | None) -> AsyncIterator[None]:
    """`prune_periodically` in a task for the block (nothing when `retention` is None): how
    `agentloop serve` and `agentloop worker` keep a bot's stores within its retention."""
    if retention is None:
        yield
        return
    task = asyncio.create_task(prune_periodically(url, bot=bot, retention=retention), name=f"agentloop-prune-{bot}")
    _log.info("stores.pruning", bot=bot, stores=shown_url(url), every_minutes=retention.every_minutes)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
