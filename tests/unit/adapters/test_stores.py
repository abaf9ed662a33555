"""`open_stores`: one bundle of a bot's stores from a URL or a directory; refused URLs are one line;
a restarted bot sees the same history, memory and RAG results."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import typing
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest

from agentloop.adapters import DEFAULT_STORES_URL, HashingEmbedder, Stores, open_note_taking, open_stores, reembed_stores
from agentloop.adapters.errors import StoreUrlError
from agentloop.adapters.sqlite._connection import connect
from agentloop.cli import main
from agentloop.notes import KnowledgeItem, Layer, LayerIds, NoteType
from agentloop.ports import (
    AttemptNotesStore,
    KnowledgeRepository,
    MemoryEntry,
    MemoryStore,
    RagStore,
    SessionStore,
    TaskRecord,
    TaskState,
    TaskStore,
    TrajectoryStore,
)
from agentloop.scopes import Scope
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.notes import make_execution
from systems import StandardOptions, standard_pipeline
from store_kit import check_reembedding, open_descriptors

ROOT = Path(__file__).resolve().parents[3]

# Runs turns through a standard pipeline, then either closes cleanly or dies without
# saving the index ("crash"), or only reads back what the stores hold ("read").
SCRIPT = r"""
import asyncio, json, os, sys
from agentloop import IncomingMessage, Session
from agentloop.adapters import HashingEmbedder, open_stores
from agentloop.scopes import Scope
from agentloop.logging import configure_logging
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import standard_pipeline
from agentloop.scopes import Scope, history_scope

ADA = Scope(user_id="ada")  # memory and indexed answers of user ada, who has no org

configure_logging("WARNING")
data_dir, mode = sys.argv[1], sys.argv[2]
session = Session("chat-1", user_id="ada")
queries = ["deployment schedule", "invoice day", "lunch time"]

def snapshot(stores):
    return {
        "history": [[m.role.value, m.content] for m in asyncio.run(stores.sessions.recent(history_scope(session), 100))],
        "memory": [[e.user_text, e.assistant_text] for e in asyncio.run(stores.memory.recent(ADA, 100))],
        "rag": [[[h.id, h.text, round(h.score, 5)] for h in asyncio.run(stores.rag.search(ADA, q, 3))] for q in queries],
    }

if mode == "read":
    stores = open_stores(data_dir, bot="helper", embedder=HashingEmbedder(dim=128))
    print(json.dumps(snapshot(stores)))
    stores.close()
    sys.exit(0)
answers = {"When is the deployment?": "The deployment runs every night at two.",
           "When are invoices sent?": "Invoices go out on the first of the month.",
           "When is lunch?": "Lunch is at noon."}
if mode == "crash":
    answers = {"One more thing?": "The deployment window moved to three."}
llm = ScriptedLLM(list(answers.values()))
pipeline = standard_pipeline(llm, RecordingChannel(), data_dir=data_dir, bot="helper",
                             embedder=HashingEmbedder(dim=128))
loop = pipeline.build()
for question in answers:
    loop.run_turn_sync(session, IncomingMessage(question))
print(json.dumps(snapshot(pipeline.stores)))
sys.stdout.flush()
if mode == "crash":
    os._exit(0)
pipeline.close()
"""


def bot_process(data_dir: Path, mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir), mode], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_restarted_bot_sees_the_same_history_memory_and_rag(tmp_path: Path) -> None:
    written = bot_process(tmp_path, "write")
    assert written["history"][:2] == [["user", "When is the deployment?"],  # type: ignore[index]
                                      ["assistant", "The deployment runs every night at two."]]
    assert len(written["memory"]) == 3  # type: ignore[arg-type]
    assert bot_process(tmp_path, "read") == written


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_damaged_index_file_is_rebuilt_with_identical_results(tmp_path: Path, damage: str) -> None:
    written = bot_process(tmp_path, "write")
    index = tmp_path / "helper.rag.hnsw"
    if damage == "delete":
        index.unlink()
    else:
        index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
    assert bot_process(tmp_path, "read") == written
    assert index.exists()


def test_a_crash_before_the_index_is_saved_loses_nothing(tmp_path: Path) -> None:
    bot_process(tmp_path, "write")
    after_crash = bot_process(tmp_path, "crash")
    reread = bot_process(tmp_path, "read")
    assert reread == after_crash
    assert ["One more thing?", "The deployment window moved to three."] in reread["memory"]  # type: ignore[operator]


def test_bot_names_that_are_not_file_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bot name"):
        open_stores(tmp_path, bot="../escape")
    assert list(tmp_path.iterdir()) == []


MODULES = ("sqlite._thread", "sqlite.knowledge", "sqlite.trajectories", "sqlite.tasks")
"""The modules that connect once each when `open_stores` opens a bot's files (sqlite._thread:
the one file of history, memory and RAG)."""


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[sqlite3.Connection]:
    """Every connection the bot's stores open from now on."""
    from agentloop.adapters.sqlite import _connection as sqlite_module

    opened: list[sqlite3.Connection] = []
    real_connect = sqlite_module.connect

    def tracking_connect(path: str | Path) -> sqlite3.Connection:
        opened.append(real_connect(path))
        return opened[-1]

    for module in MODULES:
        monkeypatch.setattr(f"agentloop.adapters.{module}.connect", tracking_connect)
    return opened


def assert_all_closed(connections: list[sqlite3.Connection], count: int = len(MODULES)) -> None:
    assert len(connections) == count
    for conn in connections:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")


def test_a_failed_open_leaves_no_connection_behind(tmp_path: Path, connections: list[sqlite3.Connection]) -> None:
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=64))
    asyncio.run(stores.rag.add(Scope(), "a text indexed at dim 64"))
    stores.close()
    connections.clear()
    with pytest.raises(ValueError, match="was embedded by 'hashing-v1/64', but it is opened with the embedder 'hashing-v1/32'"):
        open_stores(tmp_path, embedder=HashingEmbedder(dim=32))
    assert_all_closed(connections, count=1)  # history and memory's file was open when the RAG store refused


def test_standard_pipeline_closes_the_stores_it_opened_when_building_fails(
    tmp_path: Path, connections: list[sqlite3.Connection]
) -> None:
    with pytest.raises(ValueError, match="max_llm_calls"):
        standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path, options=StandardOptions(max_llm_calls=0))
    assert_all_closed(connections)


PORTS = {
    "sessions": SessionStore, "memory": MemoryStore, "rag": RagStore, "knowledge": KnowledgeRepository,
    "trajectories": TrajectoryStore, "tasks": TaskStore, "attempt_notes": AttemptNotesStore,
}
AT = datetime(2026, 3, 1, tzinfo=UTC)


def fill(stores: Stores) -> None:
    """One row in every store."""
    asyncio.run(stores.sessions.append(Scope(session_id="s1"), []))
    asyncio.run(stores.memory.add(MemoryEntry(Scope(user_id="ada"), "s1", "When is lunch?", "At noon.", AT)))
    asyncio.run(stores.rag.add(Scope(user_id="ada"), "Lunch is at noon."))
    asyncio.run(stores.knowledge.add(KnowledgeItem(NoteType.PATTERN, Layer.COMPANY, LayerIds("default"), "lunch", "Lunch is at noon.",
                                       stores.embedder.embed(["Lunch is at noon."])[0], AT)))
    asyncio.run(stores.trajectories.append([make_execution("search", session_id="s1")]))
    asyncio.run(stores.tasks.add(TaskRecord("t1", "report", {}, TaskState.INCOMING, AT, AT)))
    asyncio.run(stores.attempt_notes.append("t1", "## Attempt 1\n"))


def test_every_store_field_is_typed_as_its_port() -> None:
    hints = typing.get_type_hints(Stores)
    assert {name: hints[name] for name in PORTS} == PORTS
    assert {"url", "bot", "embedder"} <= {f.name for f in attrs.fields(Stores)}


@pytest.mark.parametrize("form", ["url", "path", "pathlike"])
def test_a_sqlite_url_and_a_plain_path_open_the_same_stores_and_reopening_sees_the_data(tmp_path: Path, form: str) -> None:
    where: str | Path = {"url": f"sqlite:///{tmp_path}", "path": str(tmp_path), "pathlike": tmp_path}[form]
    with open_stores(where, bot="helper", embedder=HashingEmbedder(dim=32)) as stores:
        assert (stores.url, stores.bot) == (f"sqlite:///{tmp_path}", "helper")
        for name, port in PORTS.items():
            members = [m for m in dir(port) if not m.startswith("_")]
            assert all(callable(getattr(getattr(stores, name), m)) for m in members), name
        fill(stores)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"helper.sqlite3", "helper.rag.hnsw", "helper.notes.sqlite3", "helper.notes.sqlite3.hnsw",
            "helper.trajectories.sqlite3", "helper.tasks.sqlite3"} <= names  # the layout of earlier releases
    assert all(name.startswith("helper.") for name in names)
    with open_stores(f"sqlite:///{tmp_path}", bot="helper", embedder=HashingEmbedder(dim=32)) as again:
        assert [e.assistant_text for e in asyncio.run(again.memory.recent(Scope(user_id="ada"), 5))] == ["At noon."]
        assert [h.text for h in asyncio.run(again.rag.search(Scope(user_id="ada"), "lunch", 1))] == ["Lunch is at noon."]
        assert [item.title for item in asyncio.run(again.knowledge.items())] == ["lunch"]
        assert asyncio.run(again.trajectories.count()) == 1
        assert asyncio.run(again.tasks.get("t1", Scope())) is not None
        assert asyncio.run(again.attempt_notes.read("t1")) == "## Attempt 1\n"
    assert (tmp_path / "helper.attempt-notes" / "TASK-t1.md").is_file()


def test_a_relative_sqlite_url_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_stores() as stores:
        assert stores.url == "sqlite:///agentloop-data" and DEFAULT_STORES_URL == "sqlite:///./agentloop-data"
    with open_stores("sqlite:///data/bots", bot="b"):
        pass
    assert (tmp_path / "agentloop-data" / "bot.sqlite3").exists() and (tmp_path / "data" / "bots" / "b.sqlite3").exists()


def refused(url: str) -> str:
    with pytest.raises(StoreUrlError) as error:
        open_stores(url)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and isinstance(error.value, ValueError)
    return message


def test_unknown_schemes_are_one_line_errors_naming_the_url_and_what_to_give() -> None:
    message = refused("mysql://db.example/bots")
    assert "mysql://db.example/bots" in message and "'mysql'" in message and "sqlite:///DIR" in message
    assert "no backend opens 'postgresql+psycopg' URLs" in refused("postgresql+psycopg://db.example/bots")
    assert "no host" in refused("sqlite://db.example/bots")


def test_a_place_that_cannot_hold_the_stores_is_a_one_line_error(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    assert f"{file} is a file" in refused(str(file))
    assert "cannot be created" in refused(f"sqlite:///{file}/data")
    assert file.read_text() == "mine"


def test_without_create_a_bot_that_has_no_stores_yet_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    with pytest.raises(StoreUrlError, match="the bot 'helper' has no stores there yet; run the bot first"):
        open_stores(tmp_path / "nowhere", bot="helper", create=False)
    assert not (tmp_path / "nowhere").exists()
    open_stores(tmp_path, bot="helper").close()
    open_stores(tmp_path, bot="helper", create=False).close()


@pytest.mark.parametrize("damaged", ["bot.sqlite3", "bot.notes.sqlite3", "bot.trajectories.sqlite3", "bot.tasks.sqlite3"])
def test_a_store_that_fails_to_open_leaves_no_file_open(tmp_path: Path, damaged: str) -> None:
    (tmp_path / damaged).write_bytes(b"these are my notes, not a database\n" * 10)
    with pytest.raises(sqlite3.DatabaseError) as stores:
        open_stores(tmp_path)
    with pytest.raises(sqlite3.DatabaseError) as notes:
        open_note_taking(tmp_path, ScriptedLLM())
    # The tracebacks (kept alive here) hold the frames that opened the connections:
    # only an explicit close, not garbage collection, lets go of the files.
    assert stores.value is not None and notes.value is not None
    assert [name for name in os.listdir(tmp_path) if open_descriptors(tmp_path / name)] == []


def test_close_closes_every_store_even_when_one_close_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_stores(tmp_path) as first:
        knowledge_type = type(first.knowledge)
    real_close = knowledge_type.close

    def failing_close(self: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(knowledge_type, "close", failing_close)
    stores = open_stores(tmp_path)
    with pytest.raises(OSError, match="disk gone"):
        stores.close()
    stores.close()  # a second close does nothing
    assert [name for name in os.listdir(tmp_path) if open_descriptors(tmp_path / name) and "notes" not in name] == []
    real_close(stores.knowledge)
    assert [name for name in os.listdir(tmp_path) if open_descriptors(tmp_path / name)] == []


def test_whoever_opens_the_stores_closes_them(tmp_path: Path) -> None:
    """A pipeline or note-taking given open stores leaves them open; given a place, they close what they opened."""
    with open_stores(tmp_path) as stores:
        standard_pipeline(ScriptedLLM(), RecordingChannel(), stores=stores).close()
        open_note_taking(stores, ScriptedLLM()).close()
        fill(stores)  # still open
        with pytest.raises(ValueError, match="open stores already have their bot and embedder"):
            open_note_taking(stores, ScriptedLLM(), bot="other")
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=f"sqlite:///{tmp_path}") as pipeline:
        assert pipeline.stores is not None and pipeline.stores.url == f"sqlite:///{tmp_path}"
    open_note_taking(tmp_path, ScriptedLLM()).close()
    assert [name for name in os.listdir(tmp_path) if open_descriptors(tmp_path / name)] == []


def test_reembedding_moves_the_sqlite_stores_to_another_embedder(tmp_path: Path) -> None:
    check_reembedding(f"sqlite:///{tmp_path}")
    with pytest.raises(StoreUrlError, match="the bot 'nobody' has no stores there yet"):
        reembed_stores(tmp_path, bot="nobody", embedder=HashingEmbedder())


def test_every_file_and_folder_the_embedded_stores_create_is_readable_by_their_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "private" / "bots"
    umask = os.umask(0o002)  # as lax as a shared machine's: group and others could read what it lets by
    try:
        assert main(["demo", "--data-dir", str(data)], io.StringIO()) == 0
        with open_stores(data) as stores:
            asyncio.run(stores.attempt_notes.append("T1", "## tried\n"))
            asyncio.run(stores.sessions.recent(Scope("s"), 1))
            modes = {path.relative_to(tmp_path).as_posix(): stat.S_IMODE(path.stat().st_mode)
                     for path in [tmp_path / "private", *(tmp_path / "private").rglob("*")]}
    finally:
        os.umask(umask)
    names = set(modes)
    for made in ("bot.sqlite3", "bot.sqlite3-wal", "bot.sqlite3-shm", "bot.notes.sqlite3", "bot.notes.sqlite3.hnsw",
                 "bot.notes.sqlite3.hnsw.sha256", "bot.notes.sqlite3.hnsw.lock", "bot.attempt-notes/TASK-T1.md"):
        assert f"private/bots/{made}" in names
    loose = {name: oct(mode) for name, mode in modes.items()
             if mode != (0o700 if (tmp_path / name).is_dir() else 0o600)}
    assert loose == {}


def test_an_in_memory_sqlite_database_leaves_no_file_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    conn = connect(":memory:")
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    assert list(tmp_path.iterdir()) == []
