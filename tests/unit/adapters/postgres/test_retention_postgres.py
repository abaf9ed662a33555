"""The retention suite (`agentloop.testing.stores.retention`) on the PostgreSQL backend, and
what only it prunes: the workers' finished inbox messages, one prune of a bot at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from agentloop.adapters import HashingEmbedder, Stores, open_stores
from agentloop.adapters.errors import StoreUrlError
from agentloop.adapters.retention import prune_stores
from agentloop.retention import Retention
from agentloop.scopes import Scope
from agentloop.testing.stores.retention import RetentionTests
from agentloop.workers import migrate_inbox


class TestPostgresRetention(RetentionTests):
    @pytest.fixture
    def open_backend(self, postgres_url: str) -> Callable[..., Stores]:
        return lambda embedder=None: open_stores(postgres_url, embedder=embedder or HashingEmbedder(dim=64))

    @pytest.fixture
    def age_history(self, postgres_url: str) -> Callable[[Stores, Scope, datetime], None]:
        def age(stores: Stores, scope: Scope, when: datetime) -> None:
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(
                    f"UPDATE agentloop_{stores.bot}.history_activity SET last_at = %s WHERE scope_session = %s",
                    (when, scope.session_id),
                )

        return age


def _finished_message(conn: psycopg.Connection, bot: str, key: str, finished: datetime | None) -> None:
    job = conn.execute(
        "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status) VALUES ('agentloop.x', 'agentloop.turn', '{}', %s) "
        "RETURNING id",
        ("succeeded" if finished else "todo",),
    ).fetchone()
    assert job is not None
    conn.execute(
        "INSERT INTO agentloop_inbox (bot, message_id, key, scope, session, message, job_id, finished_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (bot, key, key, Jsonb([None] * 4), Jsonb({"id": "s1"}), Jsonb({"text": "hi"}), job[0], finished),
    )


def test_finished_inbox_messages_older_than_the_window_go_with_their_jobs(postgres_url: str) -> None:
    open_stores(postgres_url, embedder=HashingEmbedder(dim=64)).close()
    asyncio.run(migrate_inbox(postgres_url))
    now = datetime.now(UTC)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        _finished_message(conn, "bot", "old", now - timedelta(days=9))
        _finished_message(conn, "bot", "recent", now - timedelta(days=1))
        _finished_message(conn, "bot", "unfinished", None)
        _finished_message(conn, "other", "old-of-another-bot", now - timedelta(days=9))
        report = prune_stores(postgres_url, retention=Retention(inbox_days=7))
        kept = conn.execute("SELECT bot, key FROM agentloop_inbox ORDER BY bot, key").fetchall()
        jobs = conn.execute("SELECT count(*) FROM procrastinate_jobs").fetchone()
    assert report.deleted["inbox"] == 1
    assert kept == [("bot", "recent"), ("bot", "unfinished"), ("other", "old-of-another-bot")]
    assert jobs == (3,)


def test_a_prune_that_finds_another_running_returns_without_deleting(postgres_url: str) -> None:
    stores = open_stores(postgres_url, embedder=HashingEmbedder(dim=64))
    try:
        with psycopg.connect(postgres_url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(hashtext('agentloop.prune.agentloop_bot'))")
            assert prune_stores(postgres_url, retention=Retention(history_turns=1)).deleted == {}
        assert prune_stores(postgres_url, retention=Retention(history_turns=1)).deleted["history"] == 0
    finally:
        stores.close()


def test_a_prune_asked_to_rebuilds_the_vector_indexes_and_reports_the_schemas_size(postgres_url: str) -> None:
    stores = open_stores(postgres_url, embedder=HashingEmbedder(dim=64))
    try:
        report = prune_stores(postgres_url, retention=Retention(), vectors=True)
    finally:
        stores.close()
    assert report.compacted and report.bytes_before and report.bytes_after


def test_pruning_a_bot_with_no_stores_there_says_so_in_one_line(postgres_url: str) -> None:
    with pytest.raises(StoreUrlError) as refused:
        prune_stores(postgres_url, bot="nobody", retention=Retention(history_days=1))
    assert "the bot 'nobody' has no stores there yet" in str(refused.value) and "\n" not in str(refused.value)


def test_erasing_a_user_removes_when_their_histories_were_last_written(postgres_url: str) -> None:
    """The activity table holds the user's ids: it goes with their history, and another user's stays."""
    from agentloop import ChatMessage
    from agentloop.privacy import Subject

    with open_stores(postgres_url, bot="activity", embedder=HashingEmbedder(dim=64)) as stores:
        for user in ("alice", "bob"):
            asyncio.run(stores.sessions.append(Scope("acme", session_id=f"s-{user}", user_id=user), (ChatMessage.user("hi"),)))
        asyncio.run(stores.erase(Subject.user("alice", company_id="acme"), actor="test"))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        users = [user for (user,) in conn.execute("SELECT scope_user FROM agentloop_activity.history_activity").fetchall()]
    assert users == ["bob"]
