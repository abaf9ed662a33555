"""The retention suite (`agentloop.testing.stores.retention`) on the SQLite backend and on the
in-memory stores that grow (usage, summaries); the settings' file and errors."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import structlog
from memory_backend import MemoryData, open_memory_stores

from agentloop.adapters import HashingEmbedder, Stores, open_stores
from agentloop.adapters.retention import prune_in_memory, prune_periodically
from agentloop.messages import Usage
from agentloop.ports.usage import RecordedCall, UsageRecord
from agentloop.retention import PruneReport, Retention, RetentionError, load_retention
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import AT, CHAIN
from agentloop.testing.stores.retention import Prune, RetentionTests, SummaryRetentionTests, UsageRetentionTests


class TestSqliteRetention(RetentionTests):
    @pytest.fixture
    def open_backend(self, tmp_path: Path) -> Callable[..., Stores]:
        return lambda embedder=None: open_stores(tmp_path, embedder=embedder or HashingEmbedder(dim=64))

    @pytest.fixture
    def age_history(self, tmp_path: Path) -> Callable[[Stores, Scope, datetime], None]:
        def age(stores: Stores, scope: Scope, when: datetime) -> None:
            with closing(sqlite3.connect(tmp_path / f"{stores.bot}.sqlite3")) as conn, conn:
                conn.execute(
                    "UPDATE history_activity SET last_at = ? WHERE scope_session = ?", (when.timestamp(), scope.session_id)
                )

        return age


class TestMemoryRetention(UsageRetentionTests, SummaryRetentionTests):
    @pytest.fixture
    def open_backend(self) -> Callable[..., Stores]:
        data = MemoryData()
        return lambda embedder=None: open_memory_stores(data, embedder=embedder)

    @pytest.fixture
    def prune(self) -> Prune:
        return lambda stores, retention, now: prune_in_memory(stores, retention, now=now)


def test_a_retention_file_gives_the_settings_of_its_table(tmp_path: Path) -> None:
    path = tmp_path / "retention.toml"
    path.write_text("[retention]\nhistory_days = 90\nusage_days = 30\nevery_minutes = 60\n")
    assert load_retention(path) == Retention(history_days=90, usage_days=30, every_minutes=60)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("history_days = 0", "history_days must be a whole number of at least 1, got 0"),
        ("history_days = 1.5", "got 1.5"),
        ("[retention]\nhistroy_days = 3", "unknown setting 'histroy_days'"),
        ("history_days = ", "is not valid TOML"),
    ],
)
def test_a_bad_retention_file_is_refused_in_one_line_naming_the_setting(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "retention.toml"
    path.write_text(text)
    with pytest.raises(RetentionError) as refused:
        load_retention(path)
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_the_schedule_prunes_at_start_and_after_each_interval_as_of_its_clock(tmp_path: Path) -> None:
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=64))
    with stores:
        for day in range(6):
            call = RecordedCall("m", Usage(10, 1), 0.5)
            asyncio.run(stores.usage.record(UsageRecord(f"t{day}", CHAIN, AT + timedelta(days=day, hours=1), (call,))))
    times = iter([AT + timedelta(days=2), AT + timedelta(days=4), AT + timedelta(days=6)])
    slept: list[float] = []
    reports: list[PruneReport] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            raise asyncio.CancelledError

    retention = Retention(usage_days=1, every_minutes=90)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(prune_periodically(str(tmp_path), bot="bot", retention=retention, sleep=sleep, clock=lambda: next(times),
                                       on_report=reports.append))
    assert slept == [90 * 60.0] * 3
    assert [report.rolled_up for report in reports] == [1, 2, 2]  # day 0, then days 1-2, then days 3-4


def test_a_scheduled_prune_that_fails_is_logged_and_the_schedule_goes_on(tmp_path: Path) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise asyncio.CancelledError

    with structlog.testing.capture_logs() as logs, pytest.raises(asyncio.CancelledError):
        asyncio.run(prune_periodically(str(tmp_path / "no-bot-here"), bot="bot", retention=Retention(usage_days=1), sleep=sleep))
    assert [log["event"] for log in logs if log["log_level"] == "warning"] == ["stores.prune_failed"] * 2


def test_erasing_a_user_removes_when_their_histories_were_last_written(tmp_path: Path) -> None:
    """The activity table holds the user's ids: it goes with their history, and another user's stays."""
    from agentloop import ChatMessage
    from agentloop.privacy import Subject

    with open_stores(tmp_path, embedder=HashingEmbedder(dim=64)) as stores:
        for user in ("alice", "bob"):
            scope = Scope(CHAIN.company_id, session_id=f"s-{user}", user_id=user)
            asyncio.run(stores.sessions.append(scope, (ChatMessage.user("hi"),)))
        asyncio.run(stores.erase(Subject.user("alice", company_id=CHAIN.company_id), actor="test"))
    with closing(sqlite3.connect(tmp_path / "bot.sqlite3")) as conn:
        assert [user for (user,) in conn.execute("SELECT scope_user FROM history_activity")] == ["bob"]


def test_a_historys_last_write_time_moves_on_at_most_once_an_hour(tmp_path: Path) -> None:
    """A turn's append does not rewrite the activity row each time: retention counts days, an hour is close enough."""
    from agentloop import ChatMessage

    scope = Scope(CHAIN.company_id, session_id="s", user_id="ada")

    def last_at(set_to: float | None = None) -> float:
        with closing(sqlite3.connect(tmp_path / "bot.sqlite3")) as conn, conn:
            if set_to is not None:
                conn.execute("UPDATE history_activity SET last_at = ?", (set_to,))
            return float(conn.execute("SELECT last_at FROM history_activity").fetchone()[0])

    with open_stores(tmp_path, embedder=HashingEmbedder(dim=64)) as stores:
        asyncio.run(stores.sessions.append(scope, (ChatMessage.user("one"),)))
        minutes_ago = last_at(set_to=last_at() - 600)
        asyncio.run(stores.sessions.append(scope, (ChatMessage.user("two"),)))
        assert last_at() == minutes_ago
        hours_ago = last_at(set_to=minutes_ago - 7200)
        asyncio.run(stores.sessions.append(scope, (ChatMessage.user("three"),)))
        assert last_at() > hours_ago + 7000
