"""Several processes on one SQLite data directory: each sees the others' texts and notes
without a restart, may act on notes another created, and no save loses another's rows."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import agentloop.adapters.vectors.scoped as planning
from agentloop.adapters import HashingEmbedder, SqliteKnowledgeRepository, SqliteRagStore
from agentloop.adapters.sqlite.knowledge import AsyncSqliteKnowledgeRepository
from agentloop.notes import KnowledgeBase, KnowledgeItem, Layer, LayerIds, NoteStatus, NoteType
from agentloop.scopes import Scope

ROOT = Path(__file__).resolve().parents[4]
OWNER = LayerIds("acme", "o1", "t1", "p1")
SCOPE = Scope(project_id="p1")
AT = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 64

# The other process: opens both stores on the data directory given as argv[1], then
# answers one JSON command per stdin line with one JSON line on stdout.
PEER = """
import asyncio, json, sys
from datetime import UTC, datetime
from pathlib import Path
import agentloop.adapters.vectors.scoped as planning
from agentloop.adapters import HashingEmbedder, SqliteKnowledgeRepository, SqliteRagStore
from agentloop.adapters.sqlite.knowledge import AsyncSqliteKnowledgeRepository
from agentloop.logging import configure_logging
from agentloop.notes import KnowledgeBase, KnowledgeItem, Layer, LayerIds, NoteStatus, NoteType
from agentloop.scopes import Scope

configure_logging("WARNING", stream=sys.stderr)
planning.EXACT_LIMIT = 0  # as in the test's process: every store keeps its graph
data = Path(sys.argv[1])
embedder = HashingEmbedder(dim=int(sys.argv[2]))
rag = SqliteRagStore.open(data / "bot.sqlite3", embedder, data / "bot.rag.hnsw")
repository = AsyncSqliteKnowledgeRepository(SqliteKnowledgeRepository(data / "bot.notes.sqlite3", dim=embedder.dim))
notes = KnowledgeBase(repository, embedder)
owner, scope = LayerIds("acme", "o1", "t1", "p1"), Scope(project_id="p1")
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    op, arg = json.loads(line)
    if op == "add_text":
        answer = rag.add(scope, arg)
    elif op == "search_text":
        answer = [hit.text for hit in rag.search(scope, arg, 3)]
    elif op == "add_note":
        item = KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, owner, arg, arg, notes.embed(arg), datetime.now(UTC))
        answer = asyncio.run(notes.add(item)).key
    elif op == "search_notes":
        answer = [hit.item.title for hit in asyncio.run(notes.search(arg, owner, min_similarity=0.0))]
    elif op == "transition":
        answer = asyncio.run(notes.transition(arg[0], NoteStatus(arg[1]))).status.value
    elif op == "add_reference":
        answer = asyncio.run(notes.add_reference(arg)).reference_count
    else:
        rag.close()
        repository.close()
        answer = "closed"
    print(json.dumps(answer), flush=True)
"""


@pytest.fixture(autouse=True)
def graphs_at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the graph files processes share, which a store keeps only once
    exact search no longer covers it: here, from its first row."""
    monkeypatch.setattr(planning, "EXACT_LIMIT", 0)


class Peer:
    """The stores of another process on the same data directory, driven line by line."""

    def __init__(self, data: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self._process = subprocess.Popen(
            [sys.executable, "-c", PEER, str(data), str(DIM)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        assert self._read() == "ready"

    def __call__(self, op: str, arg: Any = None) -> Any:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps([op, arg]) + "\n")
        self._process.stdin.flush()
        return self._read()

    def _read(self) -> Any:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        assert line, f"the other process ended (exit code {self._process.wait(timeout=5)})"
        return json.loads(line)

    def close(self) -> None:
        assert self("close") == "closed"
        assert self._process.stdin is not None
        self._process.stdin.close()
        assert self._process.wait(timeout=10) == 0


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    other = Peer(tmp_path)
    yield other
    if other._process.poll() is None:
        other._process.kill()
        other._process.wait()


def _open(data: Path) -> tuple[SqliteRagStore, KnowledgeBase]:
    embedder = HashingEmbedder(dim=DIM)
    rag = SqliteRagStore.open(data / "bot.sqlite3", embedder, data / "bot.rag.hnsw")
    repository = AsyncSqliteKnowledgeRepository(SqliteKnowledgeRepository(data / "bot.notes.sqlite3", dim=DIM))
    return rag, KnowledgeBase(repository, embedder)


def _engine(notes: KnowledgeBase) -> SqliteKnowledgeRepository:
    """The SQLite repository under the note-taking's async port."""
    repository = notes.repository
    assert isinstance(repository, AsyncSqliteKnowledgeRepository)
    return repository.engine


def _note(notes: KnowledgeBase, text: str) -> KnowledgeItem:
    return asyncio.run(notes.add(KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, OWNER, text, text, notes.embed(text), AT)))


def test_this_process_finds_and_acts_on_what_another_process_stored_after_it_opened(tmp_path: Path, peer: Peer) -> None:
    rag, notes = _open(tmp_path)
    rag.add(SCOPE, "the canteen opens at noon")
    _note(notes, "lunch is at noon")
    peer("add_text", "the deployment runs every night at two")
    note_id = peer("add_note", "deployments run at night")
    assert rag.search(SCOPE, "when does the deployment run", 1)[0].text == "the deployment runs every night at two"
    assert [hit.item.key for hit in asyncio.run(notes.search("deployments run at night", OWNER, k=1))] == [note_id]
    assert asyncio.run(notes.add_reference(note_id)).reference_count == 1
    assert asyncio.run(notes.transition(note_id, NoteStatus.PROPOSED)).status is NoteStatus.PROPOSED
    assert peer("add_reference", note_id) == 2
    peer.close()
    rag.close()
    _engine(notes).close()


def test_another_process_finds_and_acts_on_what_this_process_stored_after_it_opened(tmp_path: Path, peer: Peer) -> None:
    rag, notes = _open(tmp_path)
    rag.add(SCOPE, "invoices are sent on the first of the month")
    note = _note(notes, "invoices go out monthly")
    assert peer("search_text", "when are invoices sent") == ["invoices are sent on the first of the month"]
    assert peer("search_notes", "invoices go out monthly") == ["invoices go out monthly"]
    assert peer("transition", [note.key, "proposed"]) == "proposed"
    assert peer("add_reference", note.key) == 1
    peer.close()
    rag.close()
    _engine(notes).close()


def test_a_status_changed_by_another_process_moves_the_note_in_and_out_of_searches(tmp_path: Path, peer: Peer) -> None:
    repository = SqliteKnowledgeRepository(tmp_path / "bot.notes.sqlite3", dim=DIM)
    notes = KnowledgeBase(AsyncSqliteKnowledgeRepository(repository), HashingEmbedder(dim=DIM))
    note = _note(notes, "backups are kept for thirty days")
    accepted = frozenset({NoteStatus.ACCEPTED})

    def accepted_hits() -> list[int]:
        found = repository.search(notes.embed("backups"), 3, caller=OWNER, layer=Layer.PROJECT, statuses=accepted)
        return [item.key for item, _ in found]

    assert accepted_hits() == []
    peer("transition", [note.key, "proposed"])
    peer("transition", [note.key, "accepted"])
    assert accepted_hits() == [note.key]
    peer("transition", [note.key, "deprecated"])
    with capture_logs() as logs:
        assert accepted_hits() == []
    assert not [log for log in logs if log["event"] == "knowledge.search.rejected_row"]
    peer.close()
    repository.close()


def test_closing_a_process_that_opened_earlier_keeps_the_rows_another_saved_in_the_index_file(
    tmp_path: Path, peer: Peer
) -> None:
    rag, notes = _open(tmp_path)
    peer("add_text", "the office closes at six")
    peer("add_note", "the office closes at six")
    peer.close()
    rag.close()
    _engine(notes).close()
    with capture_logs() as logs:
        rag, notes = _open(tmp_path)
    assert [log["event"] for log in logs if log["event"].startswith("hnsw_index_")] == ["hnsw_index_loaded"] * 2
    assert len(rag) == 1 and len(_engine(notes)) == 1
    rag.close()
    _engine(notes).close()


ADDER = """
import sys
from pathlib import Path
import agentloop.adapters.vectors.scoped as planning
from agentloop.adapters import HashingEmbedder, SqliteRagStore
from agentloop.logging import configure_logging
from agentloop.scopes import Scope

configure_logging("WARNING", stream=sys.stderr)
planning.EXACT_LIMIT = 0
data = Path(sys.argv[1])
rag = SqliteRagStore.open(data / "bot.sqlite3", HashingEmbedder(dim=int(sys.argv[2])), data / "bot.rag.hnsw")
sys.stdin.readline()  # start together
ids = [rag.add(Scope(project_id="p1"), f"answer {n}") for n in range(int(sys.argv[3]))]
rag.close()
print(ids[-1])
"""


def test_processes_adding_the_same_texts_at_once_store_each_text_once(tmp_path: Path) -> None:
    """The RAG dedup holds across processes: the check and the insert are one write transaction."""
    SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=DIM), tmp_path / "bot.rag.hnsw").close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    adders = [
        subprocess.Popen([sys.executable, "-c", ADDER, str(tmp_path), str(DIM), "800"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(4)
    ]
    for adder in adders:
        assert adder.stdin is not None
        adder.stdin.write("go\n")
        adder.stdin.flush()
    outputs = [adder.communicate(timeout=60)[0] for adder in adders]
    assert [adder.returncode for adder in adders] == [0, 0, 0, 0]
    assert len({output.strip() for output in outputs}) == 1, "every process got the one id of the last text"
    rag = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=DIM), tmp_path / "bot.rag.hnsw")
    assert rag.texts(SCOPE) == [f"answer {n}" for n in range(800)]
    rag.close()
