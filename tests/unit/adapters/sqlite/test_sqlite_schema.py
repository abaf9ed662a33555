"""Versioned schemas: the files release 0.1 wrote (tests/fixtures/release-0.1, see make.py
there) open with the current stores, every row where the migration rules put it; a file
is migrated once, even by two processes at once; a newer file and a failed step leave it
as it was."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agentloop import Session, history_scope, knowledge_scope, memory_scope
from agentloop.adapters import (
    Stores,
    open_stores,
    HashingEmbedder,
    SqliteKnowledgeRepository,
    SqliteMemoryStore,
    SqliteTaskStore,
    SqliteTrajectoryStore,
)
from agentloop.adapters.sqlite import knowledge as sqlite_knowledge, _scopes as sqlite_scopes, tasks as sqlite_tasks
from agentloop.adapters.sqlite.tasks import AsyncSqliteTaskStore
from agentloop.adapters.errors import EmbedderMismatchError, NewerSchemaError
from agentloop.notes import Layer, LayerIds, NoteStatus
from agentloop.notes.models import trajectory_hash
from agentloop.ports import MemoryEntry, TaskRecord, TaskState
from agentloop.scopes import Scope
from agentloop.adapters import FileAttemptNotes
from agentloop.tasks import DEFAULT_LEASE, AttemptNotes, TaskLifecycle
from agentloop.testing import FakeClock
from agentloop.testing.notes import make_execution

RELEASE_0_1 = Path(__file__).resolve().parents[3] / "fixtures" / "release-0.1"
AT = datetime(2026, 1, 1, tzinfo=UTC)
DIM = HashingEmbedder().dim  # the embedder dim make.py wrote the notes with
ADA = Session("chat-ada", user_id="ada", project_id="shop")
BOB = Session("chat-bob", user_id="bob")
ANON = Session("anon")
FILES = ("helper.sqlite3", "helper.notes.sqlite3", "helper.trajectories.sqlite3", "helper.tasks.sqlite3")


@pytest.fixture
def old_data(tmp_path: Path) -> Path:
    """A copy of the data dir release 0.1 wrote."""
    for path in RELEASE_0_1.iterdir():
        if path.suffix != ".py":
            shutil.copy(path, tmp_path / path.name)
    return tmp_path


def _open_all(data: Path) -> None:
    """Open every store of the helper bot, as the current release does, and close them (with the
    hashing embedder, as the knowledge file opened alone is)."""
    open_stores(data, bot="helper", embedder=HashingEmbedder()).close()
    SqliteKnowledgeRepository(data / "helper.notes.sqlite3", dim=DIM).close()
    SqliteTrajectoryStore(data / "helper.trajectories.sqlite3").close()
    SqliteTaskStore(data / "helper.tasks.sqlite3").close()


def _dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def _steps(logs: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(log["store"], log["version"]) for log in logs if log["event"] == "stores.schema.step"]


ALL_STEPS = [("sessions", 2), ("sessions", 3), ("sessions", 4), ("memory", 2), ("memory", 3), ("memory", 4), ("memory", 5),
             ("rag", 2), ("rag", 3), ("rag", 4), ("rag", 5), ("knowledge", 2), ("knowledge", 3), ("knowledge", 4), ("knowledge", 5),
             ("knowledge", 6), ("trajectories", 2), ("trajectories", 3), ("trajectories", 4), ("trajectories", 5),
             ("tasks", 2), ("approvals", 1), ("approvals", 2), ("summaries", 1), ("summaries", 2), ("usage", 1), ("usage", 2),
             ("usage", 3), ("usage", 4), ("usage", 5), ("usage", 6), ("usage", 7), ("audit", 1), ("retention", 1)]
"""The steps opening release 0.1's files applies (a store that release did not have starts at its step 1)."""


# --- history, memory and RAG (one file, <bot>.sqlite3) ---------------------------------


def _contents(stores: Stores, session: Session) -> tuple[list[str | None], list[str], list[str]]:
    return (
        [m.content for m in asyncio.run(stores.sessions.recent(history_scope(session), 100))],
        [e.assistant_text for e in asyncio.run(stores.memory.recent(memory_scope(session), 100))],
        asyncio.run(stores.rag.texts(knowledge_scope(session))),
    )


def test_every_history_memory_and_rag_row_is_found_by_the_session_that_wrote_it(old_data: Path) -> None:
    stores = open_stores(old_data, bot="helper")
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
    hits = asyncio.run(stores.rag.search(knowledge_scope(ADA), "when does the shop open", 1))
    assert [h.text for h in hits] == ["The shop opens at nine in the morning."]
    assert asyncio.run(stores.rag.count()) == 4
    stores.close()


def test_old_rows_are_not_shown_to_a_session_with_an_org_or_team(old_data: Path) -> None:
    stores = open_stores(old_data, bot="helper")
    assert _contents(stores, Session("chat-ada", user_id="ada", project_id="shop", org_id="acme")) == ([], [], [])
    history, memory, rag = _contents(stores, Session("chat-ada", user_id="ada", project_id="shop", team_id="web"))
    assert (history, rag) == ([], []) and len(memory) == 2, "memory is per user within the org, whatever the team"
    stores.close()


def test_old_history_knows_only_its_session_id_so_any_user_of_that_id_without_org_sees_it(old_data: Path) -> None:
    """Release 0.1 history rows name no user: they stay with the session id, as they were."""
    stores = open_stores(old_data, bot="helper")
    assert len(asyncio.run(stores.sessions.recent(history_scope(Session("chat-bob")), 100))) == 2
    assert asyncio.run(stores.sessions.recent(history_scope(Session("chat-bob"), "another-company"), 100)) == ()
    stores.close()


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
    assert store.recent(Scope(), 5) == (MemoryEntry(Scope(), "s", "q", "a", AT),)
    assert [log["scope"] for log in logs if log["event"] == "stores.migration.unknown_scope"] == ["tenant-7"]
    store.close()


def test_memory_of_a_file_before_keyed_adds_is_kept_and_a_keyed_add_is_stored_once(tmp_path: Path) -> None:
    """A file at memory version 3 (no `entry_key`) opens keeping its rows; a keyed add then stores once."""
    path = tmp_path / "bot.sqlite3"
    store = SqliteMemoryStore.open(path)
    for n, session in enumerate(["s1", "s2", "s1"]):
        store.add(MemoryEntry(Scope(user_id="ada"), session, f"q{n}", f"a{n}", AT))
    store.close()
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP INDEX memory_entries_by_key; ALTER TABLE memory_entries DROP COLUMN entry_key;"
        "UPDATE schema_versions SET version = 3 WHERE name = 'memory';"
    )
    conn.close()
    with capture_logs() as logs:
        store = SqliteMemoryStore.open(path)
    assert _steps(logs) == [("memory", 4), ("memory", 5)]
    for _ in range(2):
        store.add(MemoryEntry(Scope(user_id="ada"), "s2", "q3", "a3", AT), key="m3")
    assert [e.assistant_text for e in store.recent(Scope(user_id="ada"), 10)] == ["a0", "a1", "a2", "a3"]
    assert [e.assistant_text for e in store.recent(Scope(user_id="ada"), 10, exclude_session="s1")] == ["a1", "a3"]
    store.close()


# --- notes ------------------------------------------------------------------------------


def test_every_note_keeps_its_status_and_counters_and_old_retrievals_belong_to_the_session_id(old_data: Path) -> None:
    """Release 0.1 named sessions by id only: their retrievals and feedback count for a
    default-company session with that id and no org or team."""
    notes = SqliteKnowledgeRepository(old_data / "helper.notes.sqlite3", dim=DIM)
    assert [(i.key, i.title, i.status, i.retrieval_count, i.usefulness_score) for i in notes.items()] == [
        (1, "Restart the worker", NoteStatus.ACCEPTED, 1, 1),
        (2, "Shop deploys", NoteStatus.ACCEPTED, 2, 1),
        (3, "Unreviewed idea", NoteStatus.DRAFT, 1, 0),
    ]
    assert [(r.session_id, r.session) for r in notes.retrievals(2)] == [("chat-ada", None), ("chat-bob", None)]
    query = HashingEmbedder(dim=DIM).embed(["Deploy the shop with `make deploy-shop`."])[0]
    found = notes.search(query, 1, caller=LayerIds(project_id="shop"), layer=Layer.PROJECT, statuses={NoteStatus.ACCEPTED})
    assert [item.title for item, _ in found] == ["Shop deploys"]
    assert notes.credit_session(Scope(org_id="acme", session_id="chat-bob"), AT) == []
    assert notes.credit_session(Scope(user_id="ada", session_id="chat-ada"), AT) == [], "credited by release 0.1"
    bob = Scope(user_id="bob", session_id="chat-bob")
    assert [i.key for i in notes.credit_session(bob, AT)] == [2, 3]
    assert notes.credit_session(bob, AT) == []
    notes.close()


def test_vectors_stored_before_embedders_were_recorded_belong_to_the_default_hashing_embedder(old_data: Path) -> None:
    """Release 0.1 had one embedder: its texts and notes open with it, and another is refused."""
    other = HashingEmbedder(dim=DIM, seed=1)
    with pytest.raises(EmbedderMismatchError, match=rf"helper.sqlite3 \(rag_documents\) was embedded by 'hashing-v1/{DIM}'"):
        open_stores(old_data, bot="helper", embedder=other)
    with pytest.raises(EmbedderMismatchError, match=rf"helper.notes.sqlite3 \(knowledge_items\) was embedded by 'hashing-v1/{DIM}'"):
        SqliteKnowledgeRepository(old_data / "helper.notes.sqlite3", dim=DIM, embedder=other.name)
    open_stores(old_data, bot="helper", embedder=HashingEmbedder(dim=DIM)).close()


# --- trajectories -----------------------------------------------------------------------


def test_every_execution_goes_to_the_default_company_without_org_or_team(old_data: Path) -> None:
    store = SqliteTrajectoryStore(old_data / "helper.trajectories.sqlite3")
    ada = store.load("chat-ada")
    assert [(e.id, e.parent_id, e.error, e.company_id, e.org_id, e.team_id, e.step_id) for e in ada.executions] == [
        ("t1", None, None, "default", None, None, None),
        ("t2", "t1", None, "default", None, None, None),
        ("t3", None, "exit 2", "default", None, None, None),
    ]
    assert ada.executions[1].context_snapshot == {"step": "look"}
    assert store.load("chat-ada", Scope(project_id="shop", user_id="ada")).executions == ada.executions
    assert store.load("chat-ada", Scope(org_id="acme", project_id="shop", user_id="ada")).executions == ()
    assert store.load("chat-ada", Scope("c2", project_id="shop", user_id="ada")).executions == ()
    assert [e.result for e in store.load("chat-bob", Scope(user_id="bob")).executions] == ["green"]
    assert store.is_distilled(trajectory_hash(ada.executions)), "the distilled row is kept as release 0.1 wrote it"
    store.append([make_execution("new", session_id="chat-ada", org_id="acme", project_id="shop", user_id="ada")])
    store.quarantine(make_execution("refused"), "too large")
    assert (store.count(), [q["tool_name"] for q in store.quarantined()]) == (5, ["refused"])
    store.close()


# --- tasks ------------------------------------------------------------------------------


def test_every_task_keeps_its_state_in_the_chain_without_org_team_or_project(old_data: Path) -> None:
    store = SqliteTaskStore(old_data / "helper.tasks.sqlite3")
    by_state = {state: store.in_state(state, Scope()) for state in TaskState}
    assert {state: [r.id for r in records] for state, records in by_state.items()} == {
        state: [f"task-{state.value}"] for state in TaskState
    }
    (claimed,) = by_state[TaskState.CLAIMED]
    later = AT + timedelta(minutes=2)
    assert claimed == TaskRecord("task-claimed", "fix-bug", {"issue": "2"}, TaskState.CLAIMED, AT, later, "worker-1", 1)
    assert all(store.in_state(state, Scope(org_id="acme")) == () for state in TaskState)
    assert store.get("task-done", Scope(project_id="shop")) is None
    store.close()


def test_a_claim_from_before_leases_holds_one_lease_from_its_last_update(old_data: Path) -> None:
    store = AsyncSqliteTaskStore(SqliteTaskStore(old_data / "helper.tasks.sqlite3"))
    clock = FakeClock(start=AT + timedelta(minutes=2))
    acme = TaskLifecycle(store, AttemptNotes(FileAttemptNotes(old_data / "notes")), session=Session("s", org_id="acme"), clock=clock)
    default = TaskLifecycle(store, AttemptNotes(FileAttemptNotes(old_data / "notes")), clock=clock)
    clock.advance(DEFAULT_LEASE.total_seconds())
    assert asyncio.run(acme.claim_next("worker")) is None
    taken = asyncio.run(default.claim_next("worker"))
    assert taken is not None and (taken.id, taken.attempts) == ("task-incoming", 1)
    taken = asyncio.run(default.claim_next("worker"))
    assert taken is not None and (taken.id, taken.attempts) == ("task-claimed", 2)
    store.close()


# --- the mechanism ----------------------------------------------------------------------


def test_each_step_is_logged_once_and_reopening_changes_nothing(old_data: Path) -> None:
    with capture_logs() as logs:
        _open_all(old_data)
    assert sorted(_steps(logs)) == sorted(ALL_STEPS)
    dumps = [_dump(old_data / name) for name in FILES]
    with capture_logs() as logs:
        _open_all(old_data)
    assert _steps(logs) == []
    assert [_dump(old_data / name) for name in FILES] == dumps


def test_a_new_file_goes_through_every_step_from_release_0_1(tmp_path: Path) -> None:
    with capture_logs() as logs:
        _open_all(tmp_path)
    first_steps = {(store, 1) for store, _ in ALL_STEPS} - set(ALL_STEPS)
    assert sorted(_steps(logs)) == sorted([*ALL_STEPS, *first_steps])


OPENERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "sessions": ("helper.sqlite3", lambda d: open_stores(d, bot="helper")),
    "approvals": ("helper.sqlite3", lambda d: open_stores(d, bot="helper")),
    "memory": ("helper.sqlite3", lambda d: open_stores(d, bot="helper")),
    "rag": ("helper.sqlite3", lambda d: open_stores(d, bot="helper")),
    "knowledge": ("helper.notes.sqlite3", lambda d: SqliteKnowledgeRepository(d / "helper.notes.sqlite3", dim=DIM)),
    "trajectories": ("helper.trajectories.sqlite3", lambda d: SqliteTrajectoryStore(d / "helper.trajectories.sqlite3")),
    "tasks": ("helper.tasks.sqlite3", lambda d: SqliteTaskStore(d / "helper.tasks.sqlite3")),
}


@pytest.mark.parametrize("store", sorted(OPENERS))
def test_a_file_of_a_newer_schema_is_refused_naming_both_versions_and_the_file(old_data: Path, store: str) -> None:
    _open_all(old_data)
    name, opener = OPENERS[store]
    known = max(version for s, version in ALL_STEPS if s == store)
    with sqlite3.connect(old_data / name) as conn:
        conn.execute("UPDATE schema_versions SET version = ? WHERE name = ?", (known + 1, store))
    conn.close()
    before = _dump(old_data / name)
    with pytest.raises(NewerSchemaError) as refused:
        opener(old_data)
    message = str(refused.value)
    assert f"{store} schema at version {known + 1}, newer than version {known}" in message
    assert str(old_data / name) in message and "upgrade agentloop" in message
    assert _dump(old_data / name) == before


def _failing_after(original: Callable[..., Any]) -> Callable[..., Any]:
    def fail(*args: Any) -> Any:
        original(*args)
        raise OSError("the disk went away")

    return fail


@pytest.mark.parametrize(
    ("module", "helper", "name", "opener"),
    [
        (sqlite_knowledge, "rebuild", "helper.notes.sqlite3", OPENERS["knowledge"][1]),
        (sqlite_scopes, "copy_with_scopes", "helper.sqlite3", lambda d: SqliteMemoryStore.open(d / "helper.sqlite3")),
        (sqlite_tasks, "add_missing_columns", "helper.tasks.sqlite3", OPENERS["tasks"][1]),
    ],
    ids=["knowledge", "memory", "tasks"],
)
def test_a_failure_in_the_middle_of_a_migration_leaves_the_file_as_it_was(
    old_data: Path, monkeypatch: pytest.MonkeyPatch, module: Any, helper: str, name: str, opener: Callable[[Path], Any]
) -> None:
    before = _dump(old_data / name)
    with monkeypatch.context() as patched:
        patched.setattr(module, helper, _failing_after(getattr(module, helper)))
        with pytest.raises(OSError, match="the disk went away"):
            opener(old_data)
    assert _dump(old_data / name) == before
    opener(old_data).close()  # the next open migrates it
    assert _dump(old_data / name) != before


_OPEN_IN_A_PROCESS = """
import json, sys, time
from pathlib import Path
from structlog.testing import capture_logs
from agentloop.adapters.sqlite import sessions as sqlite_sessions
from tests.unit.adapters.sqlite.test_sqlite_schema import _open_all, _steps

rebuild = sqlite_sessions.rebuild
def slow_rebuild(*args):  # hold the first migration open long enough for the other process to arrive
    time.sleep(0.3)
    rebuild(*args)
sqlite_sessions.rebuild = slow_rebuild
Path(sys.argv[2]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.002)
with capture_logs() as logs:
    _open_all(Path(sys.argv[1]))
print(json.dumps(_steps(logs)))
"""


def test_two_processes_opening_an_old_file_at_once_migrate_it_exactly_once(old_data: Path) -> None:
    root = Path(__file__).resolve().parents[4]
    go = old_data / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_IN_A_PROCESS, str(old_data), str(old_data / f"ready-{n}"), str(go)],
            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        for n in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all((old_data / f"ready-{n}").exists() for n in range(2)) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    applied = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        applied += [tuple(step) for step in json.loads(out.strip().splitlines()[-1])]
    assert sorted(applied) == sorted(ALL_STEPS)
    stores = open_stores(old_data, bot="helper")
    assert asyncio.run(stores.rag.count()) == 4 and len(asyncio.run(stores.memory.recent(memory_scope(ADA), 10))) == 2
    stores.close()


def test_the_committed_files_are_release_0_1_s() -> None:
    """The fixture must stay unversioned and unmigrated, or the tests above prove nothing."""
    for name in FILES:
        conn = sqlite3.connect(RELEASE_0_1 / name)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        conn.close()
        assert "schema_versions" not in tables, name


def test_no_store_table_has_a_one_column_index_another_of_its_indexes_already_leads_with(tmp_path: Path) -> None:
    """Each index is written on every insert: one an index already covers only slows a turn's writes."""
    open_stores(tmp_path, embedder=HashingEmbedder(dim=DIM)).close()
    redundant = []
    for path in sorted(tmp_path.glob("*.sqlite3")):
        conn = sqlite3.connect(path)
        try:
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                indexes = {
                    name: ([row[2] for row in conn.execute(f"PRAGMA index_info('{name}')")], unique)
                    for _, name, unique, *_ in conn.execute(f"PRAGMA index_list('{table}')")
                }
                for name, (columns, unique) in indexes.items():
                    leading = [other for other, (more, _) in indexes.items() if other != name and more[:1] == columns]
                    if len(columns) == 1 and not unique and leading:
                        redundant.append((path.name, name, leading))
        finally:
            conn.close()
    assert redundant == []


def test_the_usage_table_keeps_only_the_indexes_a_turns_write_or_an_erase_needs(tmp_path: Path) -> None:
    """Every turn writes a usage row and only reports read them: each index more costs the turn a page of its
    commit. The key (session, turn, call: a turn recorded once, a session's rows) stays; a user's rows are
    found through the sessions table a trigger keeps."""
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=DIM))
    stores.close()
    (path,) = [path for path in tmp_path.glob("*.sqlite3") if path.name.endswith(".sqlite3") and "usage_calls" in _tables(path)]
    conn = sqlite3.connect(path)
    try:
        indexes = {tuple(row[2] for row in conn.execute(f"PRAGMA index_info('{name}')"))
                   for _, name, *_ in conn.execute("PRAGMA index_list('usage_calls')")}
    finally:
        conn.close()
    assert indexes == {("scope_session", "turn_id", "call_index")}


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def test_usage_rows_recorded_before_the_table_was_keyed_by_session_keep_and_still_count_a_turn_once(tmp_path: Path) -> None:
    from agentloop.adapters.sqlite import usage as sqlite_usage
    from agentloop.adapters.sqlite._connection import connect
    from agentloop.adapters.sqlite.schema import Schema, migrate
    from agentloop.messages import Usage
    from agentloop.ports import RecordedCall, UsageFilter, UsageRecord

    path = tmp_path / "bot.sqlite3"
    conn = connect(path)
    fourth = Schema("usage", sqlite_usage.SCHEMA.steps[:4], sqlite_usage.SCHEMA.detect)
    migrate(conn, fourth)
    for index in (0, 1):  # a turn of two calls, as the store wrote it into the older table
        conn.execute(
            "INSERT INTO usage_calls (turn_id, call_index, scope_company, scope_org, scope_user, scope_session, at, day, "
            "model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost) "
            "VALUES ('t1', ?, 'acme', 'o1', 'ada', 's1', '2026-11-01T00:00:00.000000Z', '2026-11-01', 'm-1', 100, 10, 0, 0, 0.5)",
            (index,),
        )
    conn.close()
    chain = Scope("acme", "o1", None, None, "ada", "s1")
    call = RecordedCall("m-1", Usage(100, 10), 0.5)

    store = sqlite_usage.SqliteUsageStore.open(path)
    try:
        assert store.total(UsageFilter(company_id="acme", session_id="s1")).calls == 2
        assert not store.record(UsageRecord("t1", chain, datetime(2026, 11, 1, tzinfo=UTC), (call, call)))  # recorded already
        assert store.total(UsageFilter(company_id="acme", user_id="ada")).usage == Usage(200, 20)
    finally:
        store.close()
