"""Scope columns and schema versions: a database written by release 0.1 opens with every
row kept, each readable by the session that wrote it when that session has no org or team."""

from __future__ import annotations

import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentloop import ChatMessage, Session, history_scope, knowledge_scope, memory_scope
from agentloop.adapters import SqliteMemoryStore, SqliteSessionStore, Stores, open_stores
from agentloop.ports import MemoryEntry
from agentloop.scopes import Scope

RELEASE_0_1 = Path(__file__).resolve().parents[1] / "fixtures" / "release-0.1"
ADA = Session("chat-ada", user_id="ada", project_id="shop")
BOB = Session("chat-bob", user_id="bob")
ANON = Session("anon")


@pytest.fixture
def old_bot(tmp_path: Path) -> Path:
    """A copy of the data dir release 0.1 wrote (see make.py beside it)."""
    for name in ("helper.sqlite3", "helper.rag.hnsw"):
        shutil.copy(RELEASE_0_1 / name, tmp_path / name)
    return tmp_path


def _contents(stores: Stores, session: Session) -> tuple[list[str | None], list[str], list[str]]:
    return (
        [m.content for m in stores.sessions.recent(history_scope(session), 100)],
        [e.assistant_text for e in stores.memory.recent(memory_scope(session), 100)],
        stores.rag.texts(knowledge_scope(session)),
    )


def test_every_row_of_a_release_0_1_database_is_found_by_the_session_that_wrote_it(old_bot: Path) -> None:
    stores = open_stores(old_bot, bot="helper")
    assert _contents(stores, ADA) == (
        ["When does the shop open?", "The shop opens at nine in the morning.",
         "And on Sundays?", "On Sundays the shop stays closed."],
        ["The shop opens at nine in the morning.", "On Sundays the shop stays closed."],
        ["The shop opens at nine in the morning.", "On Sundays the shop stays closed."],
    )
    bob_said = "You told me your favourite colour is green."
    assert _contents(stores, BOB) == (["What is my favourite colour?", bob_said], [bob_said], [bob_said])
    anon_said = "Hello from an anonymous session."
    assert _contents(stores, ANON) == (["Say hello", anon_said], [anon_said], [anon_said])
    hits = stores.rag.search(knowledge_scope(ADA), "when does the shop open", 1)
    assert [h.text for h in hits] == ["The shop opens at nine in the morning."]
    assert len(stores.rag) == 4
    stores.close()
    reopened = open_stores(old_bot, bot="helper")  # migrated once: opening again changes nothing
    assert _contents(reopened, BOB) == (["What is my favourite colour?", bob_said], [bob_said], [bob_said])
    reopened.close()


def test_old_rows_are_not_shown_to_a_session_with_an_org_or_team(old_bot: Path) -> None:
    stores = open_stores(old_bot, bot="helper")
    assert _contents(stores, Session("chat-ada", user_id="ada", project_id="shop", org_id="acme")) == ([], [], [])
    history, memory, rag = _contents(stores, Session("chat-ada", user_id="ada", project_id="shop", team_id="web"))
    assert (history, rag) == ([], []) and len(memory) == 2, "memory is per user within the org, whatever the team"
    stores.close()


def test_old_history_knows_only_its_session_id_so_any_user_of_that_id_without_org_sees_it(old_bot: Path) -> None:
    """Release 0.1 history rows name no user: they stay with the session id, as they were."""
    stores = open_stores(old_bot, bot="helper")
    assert len(stores.sessions.recent(history_scope(Session("chat-bob")), 100)) == 2
    assert stores.sessions.recent(history_scope(Session("chat-bob"), "another-company"), 100) == ()
    stores.close()


def test_new_history_of_a_repeated_session_id_stays_with_its_user(tmp_path: Path) -> None:
    store = SqliteSessionStore.open(tmp_path / "bot.sqlite3")
    store.append(history_scope(Session("s", user_id="ada")), [ChatMessage.user("ada's secret")])
    for other in (Session("s", user_id="bob"), Session("s"), Session("s", user_id="ada", org_id="acme")):
        assert store.recent(history_scope(other), 10) == ()
    assert store.recent(history_scope(Session("s", user_id="ada")), 10) == (ChatMessage.user("ada's secret"),)
    store.close()


def test_a_scope_text_release_0_1_did_not_write_is_kept_and_logged(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE memory_entries (id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, "
        "session_id TEXT NOT NULL, user_text TEXT NOT NULL, assistant_text TEXT NOT NULL, created_at TEXT NOT NULL);"
        "INSERT INTO memory_entries (scope, session_id, user_text, assistant_text, created_at) "
        "VALUES ('tenant-7', 's', 'q', 'a', '2026-01-01T00:00:00+00:00');"
    )
    conn.close()
    with capture_logs() as logs:
        store = SqliteMemoryStore.open(path)
    assert store.recent(Scope(), 5) == (
        MemoryEntry(Scope(), "s", "q", "a", datetime(2026, 1, 1, tzinfo=UTC)),
    )
    assert [log["scope"] for log in logs if log["event"] == "stores.migration.unknown_scope"] == ["tenant-7"]
    store.close()


def test_a_table_of_a_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    SqliteMemoryStore.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_versions SET version = 99 WHERE name = 'memory_entries'")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match="schema version 99, newer than .* upgrade agentloop"):
        SqliteMemoryStore.open(path)
