"""The PostgreSQL backend itself: opening from a URL, its private event loop, migrations,
the vectors' dimension, bots sharing a database, and the tenant filter inside the search."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from structlog.testing import capture_logs

from agentloop.adapters import HashingEmbedder, Stores, open_stores
from agentloop.adapters.postgres import _database as database
from agentloop.adapters.postgres._nearest import EF_SEARCH, nearest_query
from agentloop.adapters.postgres.schema import Schema, Step, migrate
from agentloop.adapters.postgres._scopes import scope_match
from agentloop import FinishReason, IncomingMessage, Session, history_scope
from agentloop.adapters.errors import EmbedderMismatchError, NewerSchemaError, StoreUrlError
from agentloop.errors import StoreError, StoreUnavailableError
from agentloop.notes.errors import ExecutionRefusedError
from agentloop.messages import ChatMessage, Role
from agentloop.ports.stores import MemoryEntry
from agentloop.notes import RETRIEVABLE, KnowledgeItem, Layer, LayerIds, NoteStatus, NoteType, quarantine_record
from agentloop.scopes import Scope
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.notes import make_execution
from store_kit import check_reembedding  # the same checks as on SQLite
from systems import standard_pipeline

ROOT = Path(__file__).resolve().parents[4]
AT = datetime(2026, 1, 1, tzinfo=UTC)
ADA = Scope(user_id="ada", session_id="s1")
BOB = Scope(user_id="bob", session_id="s1")


def open_bot(url: str, bot: str = "helper", dim: int = 64) -> Stores:
    return open_stores(url, bot=bot, embedder=HashingEmbedder(dim=dim))


@pytest.fixture
def stores(postgres_url: str) -> Iterator[Stores]:
    with open_bot(postgres_url) as opened:
        yield opened


def said(text: str) -> ChatMessage:
    return ChatMessage(Role.USER, text)


def test_stores_answer_from_one_asyncio_run_after_another_and_from_another_thread(stores: Stores) -> None:
    asyncio.run(stores.sessions.append(ADA, [said("one")]))
    asyncio.run(stores.sessions.append(ADA, [said("two")]))
    seen: list[tuple[ChatMessage, ...]] = []
    writer = threading.Thread(target=lambda: seen.append(asyncio.run(stores.sessions.recent(ADA, 10))))
    writer.start()
    writer.join()
    assert [m.content for m in seen[0]] == ["one", "two"]


def test_a_call_after_close_says_the_stores_are_closed(postgres_url: str) -> None:
    stores = open_bot(postgres_url)
    stores.close()
    stores.close()
    with pytest.raises(RuntimeError, match="are closed; open them again with open_stores"):
        asyncio.run(stores.rag.count())


def test_rows_survive_a_reopen_and_the_schema_is_not_migrated_again(postgres_url: str) -> None:
    with open_bot(postgres_url) as stores:
        asyncio.run(stores.sessions.append(ADA, [said("kept")]))
        text_id = asyncio.run(stores.rag.add(ADA, "the shop opens at nine"))
    with psycopg.connect(postgres_url) as conn:
        before = conn.execute("SELECT name, version FROM agentloop_helper.schema_versions ORDER BY name").fetchall()
    with open_bot(postgres_url) as stores:
        assert [m.content for m in asyncio.run(stores.sessions.recent(ADA, 10))] == ["kept"]
        assert [hit.id for hit in asyncio.run(stores.rag.search(ADA, "when does the shop open", 1))] == [text_id]
    with psycopg.connect(postgres_url) as conn:
        after = conn.execute("SELECT name, version FROM agentloop_helper.schema_versions ORDER BY name").fetchall()
    assert after == before and {name for name, _ in after} >= {"sessions", "rag", "knowledge", "tasks", "attempt_notes"}


def test_workers_opening_a_new_database_together_migrate_it_once(postgres_url: str) -> None:
    with ThreadPoolExecutor(4) as threads:
        opened = list(threads.map(lambda _: open_bot(postgres_url), range(4)))
    for stores in opened:
        asyncio.run(stores.sessions.append(ADA, [said("hi")]))
        stores.close()
    with psycopg.connect(postgres_url) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM agentloop_helper.schema_versions WHERE name = 'sessions'").fetchone()
        (messages,) = conn.execute("SELECT count(*) FROM agentloop_helper.session_messages").fetchone()
    assert (rows, messages) == (1, 4)


def test_a_database_of_a_newer_release_is_refused_naming_both_versions_and_left_unchanged(postgres_url: str) -> None:
    open_bot(postgres_url).close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("UPDATE agentloop_helper.schema_versions SET version = 99 WHERE name = 'tasks'")
    with pytest.raises(NewerSchemaError, match="tasks schema at version 99, newer than version 1") as error:
        open_bot(postgres_url)
    assert "agentloop_helper" in str(error.value) and "upgrade agentloop" in str(error.value)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM agentloop_helper.schema_versions WHERE name = 'tasks'").fetchone() == (99,)


def test_vectors_of_another_dimension_are_refused(postgres_url: str) -> None:
    open_bot(postgres_url, dim=64).close()
    with pytest.raises(EmbedderMismatchError, match=r"\(rag_documents\) was embedded by 'hashing-v1/64', but it is opened with the embedder 'hashing-v1/32'"):
        open_bot(postgres_url, dim=32)
    open_bot(postgres_url, bot="other", dim=32).close()  # another bot in the same database has its own


def _forget_embedders(url: str) -> None:
    """Make the bot's schema as it was before stores recorded their embedder."""
    with psycopg.connect(url) as conn:
        conn.execute("DROP TABLE agentloop_helper.vector_embedders")
        conn.execute("ALTER TABLE agentloop_helper.note_retrievals DROP COLUMN turn_id")  # later steps
        for table in ("rag_documents", "knowledge_items"):
            conn.execute(f"ALTER TABLE agentloop_helper.{table} DROP COLUMN words")
        conn.execute("UPDATE agentloop_helper.schema_versions SET version = 1 WHERE name IN ('rag', 'knowledge')")


def test_vectors_stored_before_embedders_were_recorded_belong_to_the_default_hashing_embedder(postgres_url: str) -> None:
    with open_bot(postgres_url) as stores:
        asyncio.run(stores.rag.add(ADA, "The shop opens at nine"))
    _forget_embedders(postgres_url)
    with pytest.raises(EmbedderMismatchError, match=r"\(rag_documents\) was embedded by 'hashing-v1/64'"):
        open_stores(postgres_url, bot="helper", embedder=HashingEmbedder(dim=64, seed=1))
    open_bot(postgres_url).close()


def test_stores_still_empty_take_the_first_embedder_whatever_their_dimension(postgres_url: str) -> None:
    open_bot(postgres_url, dim=64).close()
    _forget_embedders(postgres_url)
    with open_bot(postgres_url, dim=32) as stores:
        asyncio.run(stores.rag.add(ADA, "The shop opens at nine"))
        assert [hit.text for hit in asyncio.run(stores.rag.search(ADA, "shop", 1))] == ["The shop opens at nine"]


def test_reembedding_moves_the_stores_to_another_embedder_and_dimension(postgres_url: str) -> None:
    check_reembedding(postgres_url)


def test_bots_sharing_a_database_each_see_only_their_own_rows(postgres_url: str) -> None:
    with open_bot(postgres_url, "helper") as helper, open_bot(postgres_url, "sales") as sales:
        asyncio.run(helper.sessions.append(ADA, [said("helper's")]))
        asyncio.run(helper.rag.add(ADA, "helper's answer"))
        assert asyncio.run(sales.sessions.recent(ADA, 10)) == ()
        assert asyncio.run(sales.rag.count()) == 0 and asyncio.run(helper.rag.count()) == 1


def test_without_create_a_bot_with_no_stores_is_refused_and_nothing_is_made(postgres_url: str) -> None:
    with pytest.raises(StoreUrlError, match="the bot 'helper' has no stores there yet"):
        open_stores(postgres_url, bot="helper", create=False)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT to_regnamespace('agentloop_helper')").fetchone() == (None,)
    open_bot(postgres_url).close()
    open_stores(postgres_url, bot="helper", embedder=HashingEmbedder(dim=64), create=False).close()


def test_a_server_that_refuses_is_one_line_without_the_password() -> None:
    start = time.monotonic()
    with pytest.raises(StoreUrlError) as error:
        open_stores("postgres://ada:secret@127.0.0.1:1/bots")
    message = str(error.value)
    assert time.monotonic() - start < 5 and len(message.splitlines()) == 1
    assert "postgres://ada:***@127.0.0.1:1/bots" in message and "secret" not in message
    assert "the server cannot be reached" in message and "start PostgreSQL" in message


def test_a_server_that_never_answers_is_given_up_on_after_the_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database, "CONNECT_TIMEOUT_S", 2)  # libpq's least
    with socket.socket() as silent:  # accepts connections (the backlog) but never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        start = time.monotonic()
        with pytest.raises(StoreUrlError, match="the server cannot be reached"):
            open_stores(f"postgresql://ada:secret@127.0.0.1:{silent.getsockname()[1]}/bots")
    assert time.monotonic() - start < 5


def test_without_the_postgres_extra_the_error_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from agentloop.adapters import open_stores\n"
        "try:\n    open_stores('postgresql://db.example/bots')\n"
        "except ValueError as error:\n    print(error)\n"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "needs psycopg, which is not installed; pip install 'agentloop-ecs[postgres]'" in shown


def test_a_bot_name_too_long_for_a_schema_name_is_refused(postgres_url: str) -> None:
    with pytest.raises(StoreUrlError, match="at most 53 characters"):
        open_bot(postgres_url, bot="b" * 54)


def test_a_small_tenant_finds_its_texts_among_many_nearer_ones_of_another(stores: Stores) -> None:
    """The scope is in the query, not applied to a global top k: the HNSW index alone
    would offer only the other tenant's near-identical texts."""

    async def fill() -> None:
        for number in range(120):
            await stores.rag.add(ADA, f"the shop opens at nine on day {number}")
        for text in ("bob likes tea", "bob walks dogs", "bob reads at night"):
            await stores.rag.add(BOB, text)

    asyncio.run(fill())
    hits = asyncio.run(stores.rag.search(BOB, "the shop opens at nine", 3))
    assert sorted(hit.text for hit in hits) == ["bob likes tea", "bob reads at night", "bob walks dogs"]
    assert all(hit.scope == BOB for hit in hits)


def test_a_note_search_sees_only_the_callers_chain_however_near_the_others_are(stores: Stores) -> None:
    vector = np.ones(64, dtype=np.float32) / 8.0
    mine, theirs = LayerIds("default", "acme", "web", "shop"), LayerIds("default", "globex", "web", "shop")

    def note(owner: LayerIds, title: str, tilt: float) -> KnowledgeItem:
        embedding = vector.copy()
        embedding[0] += tilt
        return KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, owner, title, f"# {title}\n", embedding, AT, status=NoteStatus.ACCEPTED)

    asyncio.run(stores.knowledge.add_many([note(theirs, f"theirs {n}", 0.0) for n in range(60)] + [note(mine, "mine", 0.5)]))
    hits = asyncio.run(stores.knowledge.search(vector, 3, caller=mine, layer=Layer.PROJECT, statuses=RETRIEVABLE))
    assert [item.title for item, _ in hits] == ["mine"]


def test_a_bulk_import_builds_the_hnsw_index_again_and_later_batches_go_through_it(stores: Stores, postgres_url: str) -> None:
    """A batch at least as large as the table drops the index and builds it again after the
    COPY (faster than pgvector's one-by-one inserts); a smaller batch leaves it in place."""
    owner = LayerIds("default", "acme", "web", "shop")
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((1300, 64)).astype(np.float32)

    def note(number: int) -> KnowledgeItem:
        return KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, owner, f"n{number}", f"# {number}\n", vectors[number], AT,
                             status=NoteStatus.ACCEPTED, retrieval_count=number % 3, flagged_for_review=number % 2 == 1)

    first = asyncio.run(stores.knowledge.add_many([note(n) for n in range(1200)]))
    second = asyncio.run(stores.knowledge.add_many([note(n) for n in range(1200, 1300)]))
    ids = first + second
    assert ids == sorted(ids) and len(set(ids)) == 1300
    with psycopg.connect(postgres_url) as conn:
        (indexes,) = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'agentloop_helper' AND indexname = 'knowledge_items_by_embedding'"
        ).fetchone() or (0,)
    assert indexes == 1
    stored = asyncio.run(stores.knowledge.get(ids[1201]))
    assert (stored.title, stored.retrieval_count, stored.flagged_for_review, stored.created_at) == ("n1201", 1, True, AT)
    assert stored.embedding.tolist() == vectors[1201].tolist()
    for number in (7, 1250):
        hits = asyncio.run(stores.knowledge.search(vectors[number], 1, caller=owner, layer=Layer.PROJECT, statuses=RETRIEVABLE))
        assert [item.title for item, _ in hits] == [f"n{number}"]


def test_text_with_nul_characters_comes_back_as_it_was_stored(stores: Stores) -> None:
    """PostgreSQL text cannot hold NUL, and a user may type one: history, memory, RAG texts,
    attempt notes and tool results store it escaped and give it back unchanged."""
    text = "a\x00b \x01 \x010 \\0"
    asyncio.run(stores.sessions.append(ADA, [said(text)]))
    asyncio.run(stores.rag.add(ADA, text))
    asyncio.run(stores.attempt_notes.append("t1", text))
    asyncio.run(stores.attempt_notes.append("t1", text))
    asyncio.run(stores.trajectories.append([make_execution(result=text, session_id="s1")]))
    assert asyncio.run(stores.sessions.recent(ADA, 1))[0].content == text
    assert asyncio.run(stores.rag.texts(ADA)) == [text]
    assert asyncio.run(stores.attempt_notes.read("t1")) == text + text
    assert asyncio.run(stores.trajectories.load("s1")).executions[0].result == text


def test_an_execution_no_utf8_database_holds_is_refused_for_good_and_can_be_quarantined(stores: Stores) -> None:
    execution = make_execution(result="a\ud800b", execution_id="exec-\x00")
    with pytest.raises(ExecutionRefusedError, match="will never take that execution"):
        asyncio.run(stores.trajectories.append([execution]))
    asyncio.run(stores.trajectories.quarantine(execution, "refused: \ud800"))
    (kept,) = asyncio.run(stores.trajectories.quarantined())
    assert kept == quarantine_record(execution, "refused: \ud800") and kept["id"] == "exec-\x00"
    assert asyncio.run(stores.trajectories.count()) == 0


def test_a_search_walks_the_hnsw_index_with_the_tenant_filter_in_the_same_scan(stores: Stores, postgres_url: str) -> None:
    async def fill() -> None:
        for number in range(300):
            await stores.rag.add(Scope(user_id=f"u{number % 3}"), f"text {number} about things {number * 7}")

    asyncio.run(fill())
    where, params = scope_match(Scope(user_id="u1"))
    vector = HashingEmbedder(dim=64).embed(["things"])[0]
    with psycopg.connect(postgres_url) as conn:
        register_vector(conn)
        conn.execute("SET search_path TO agentloop_helper, public")
        conn.execute("ANALYZE rag_documents")
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN " + nearest_query("id", "rag_documents", "vector", where, exact=False), (vector, *params, vector, 3)
            )
        )
    assert "Index Scan using rag_documents_by_vector" in plan and "scope_user = 'u1'" in plan.split("Filter:")[1]


def test_an_older_schema_gets_only_its_missing_steps_keeping_its_rows_and_a_failing_step_changes_nothing(
    postgres_url: str,
) -> None:
    first = Schema("greetings", (Step("greetings", ("CREATE TABLE greetings (text text NOT NULL)",)),))
    second = Schema("greetings", (*first.steps, Step("who said it", ("ALTER TABLE greetings ADD COLUMN who text DEFAULT 'ada'",))))
    broken = Schema("greetings", (*second.steps, Step("a mistake", ("ALTER TABLE greetings ADD COLUMN said_at text", "ALTER TABLE greetings ADD COLUMN who text"))))

    async def migrations() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await migrate(conn, "agentloop_toy", [first], dim=4, where="toy")
            await conn.execute("INSERT INTO agentloop_toy.greetings VALUES ('hi')")
            await migrate(conn, "agentloop_toy", [second], dim=4, where="toy")
            await migrate(conn, "agentloop_toy", [second], dim=4, where="toy")  # nothing left to do
            with pytest.raises(psycopg.errors.DuplicateColumn):
                await migrate(conn, "agentloop_toy", [broken], dim=4, where="toy")
            rows = await (await conn.execute("SELECT * FROM agentloop_toy.greetings")).fetchall()
            versions = await (await conn.execute("SELECT name, version FROM agentloop_toy.schema_versions")).fetchall()
            return rows, versions

    assert asyncio.run(migrations()) == ([("hi", "ada")], [("greetings", 2)])


TERMINATE_OTHERS = (
    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def test_connections_the_server_dropped_are_replaced_before_a_read_or_a_write_takes_them(
    stores: Stores, postgres_url: str
) -> None:
    asyncio.run(stores.sessions.append(ADA, [said("one")]))
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(TERMINATE_OTHERS)
    asyncio.run(stores.memory.add(MemoryEntry(ADA, "s1", "hi", "hello", AT)))  # no retry: the pool's check caught it
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(TERMINATE_OTHERS)
    assert [m.content for m in asyncio.run(stores.sessions.recent(ADA, 10))] == ["one"]
    assert [e.assistant_text for e in asyncio.run(stores.memory.recent(ADA, 10))] == ["hello"]


@pytest.fixture
def db(postgres_url: str) -> Iterator[database.Database]:
    opened = database.Database(postgres_url, "public")
    opened.wait(opened.pool.open(wait=True))
    yield opened
    opened.close()


def losing_its_connection_first(db: database.Database, calls: list[int], *, times: int = 1) -> Callable[[], Any]:
    """A call that kills its own connection on its first `times` runs (as a server restart would) and answers 1 after."""

    async def call() -> int:
        calls.append(len(calls))
        async with db.pool.connection() as conn:
            if len(calls) <= times:
                await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            row = await (await conn.execute("SELECT 1")).fetchone()
        return 0 if row is None else int(row[0])

    return call


def test_a_call_safe_to_repeat_that_lost_its_connection_is_made_once_more_on_a_fresh_one(db: database.Database) -> None:
    calls: list[int] = []
    assert asyncio.run(db.run(losing_its_connection_first(db, calls), retry=True)) == 1
    assert len(calls) == 2


def test_a_call_not_safe_to_repeat_that_lost_its_connection_is_store_unavailable_and_not_repeated(db: database.Database) -> None:
    calls: list[int] = []
    with pytest.raises(StoreUnavailableError, match=r"^the PostgreSQL stores of .* \(schema public\) failed: the server could not be reached") as failed:
        asyncio.run(db.run(losing_its_connection_first(db, calls)))
    assert len(calls) == 1 and "\n" not in str(failed.value) and failed.value.retry_after > 0
    assert isinstance(failed.value.__cause__, psycopg.OperationalError)


def test_a_call_that_loses_its_connection_twice_is_store_unavailable(db: database.Database) -> None:
    calls: list[int] = []
    with pytest.raises(StoreUnavailableError):
        asyncio.run(db.run(losing_its_connection_first(db, calls, times=2), retry=True))
    assert len(calls) == 2


def test_an_error_of_the_statement_itself_is_a_store_error_made_once_even_when_safe_to_repeat(db: database.Database) -> None:
    calls: list[int] = []

    async def divide_by_zero() -> None:
        calls.append(1)
        async with db.pool.connection() as conn:
            await conn.execute("SELECT 1 / 0")

    with pytest.raises(StoreError) as failed:
        asyncio.run(db.run(divide_by_zero, retry=True))
    assert not isinstance(failed.value, StoreUnavailableError) and "division by zero" in str(failed.value) and calls == [1]


def test_after_the_server_drops_every_connection_between_two_turns_the_next_turn_is_stored_and_a_success(
    stores: Stores, postgres_url: str
) -> None:
    """I15 on a real server: the second turn's writes land through a checked connection, so it is a success."""
    session = Session("s1", user_id="ada")
    with standard_pipeline(ScriptedLLM(lambda request: f"echo {request.messages[-1].content}"), RecordingChannel(), stores=stores) as pipeline:
        loop = pipeline.build()
        first = asyncio.run(loop.run_turn(session, IncomingMessage("one"))).turn_outcome
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(TERMINATE_OTHERS)
        second = asyncio.run(loop.run_turn(session, IncomingMessage("two"))).turn_outcome
    assert first is not None and second is not None
    assert (first.finish_reason, second.finish_reason) == (FinishReason.SUCCESS, FinishReason.SUCCESS)
    assert not second.failures and not second.writes_lost
    assert [m.content for m in asyncio.run(stores.sessions.recent(history_scope(session), 10))] == ["one", "echo one", "two", "echo two"]


def _memory_rows_read(postgres_url: str, statements: list[tuple[str, tuple[object, ...]]]) -> int:
    """The rows of memory_entries the last recall's statement scanned, by EXPLAIN ANALYZE of it."""
    query, params = statements[-1]
    with psycopg.connect(postgres_url) as conn:
        conn.execute("SET search_path TO agentloop_helper, public")
        ((plan,),) = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", params).fetchall()
    read, nodes = 0, [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes += node.get("Plans", [])
        if node.get("Relation Name") == "memory_entries" or node.get("Index Name", "").startswith("memory_entries"):
            read += (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
    return read


def test_memory_recall_reads_as_much_at_turn_2000_of_a_session_as_at_turn_20(
    stores: Stores, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recall skips the current session without reading its rows: what it scans does not
    grow with the session (the query kept from release 0.2 read every one of them)."""
    statements: list[tuple[str, tuple[object, ...]]] = []
    execute = psycopg.AsyncConnection.execute

    async def recorded(self: psycopg.AsyncConnection[object], query: str, params: tuple[object, ...] = (), **kw: object) -> object:
        if "FROM memory_sessions" in str(query):
            statements.append((str(query), params))
        return await execute(self, query, params, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", recorded)
    user = Scope(user_id="ada")

    async def add(session: str, count: int) -> None:
        for n in range(count):
            await stores.memory.add(MemoryEntry(user, session, f"q{n}", f"a{session}{n}", AT))

    asyncio.run(add("earlier", 8))
    asyncio.run(add("current", 20))
    asyncio.run(stores.memory.recent(user, 5, exclude_session="current"))
    early = _memory_rows_read(postgres_url, statements)
    asyncio.run(add("current", 2000))
    recalled = asyncio.run(stores.memory.recent(user, 5, exclude_session="current"))
    assert _memory_rows_read(postgres_url, statements) == early <= 20
    assert [e.assistant_text for e in recalled] == ["aearlier3", "aearlier4", "aearlier5", "aearlier6", "aearlier7"]


def test_memory_written_before_the_sessions_table_is_recalled_after_the_upgrade(postgres_url: str) -> None:
    """A bot whose memory schema is at version 1 gets `memory_sessions` filled from its rows."""
    with open_bot(postgres_url) as stores:
        for n, session in enumerate(["s1", "s2", "s1", "s3"]):
            asyncio.run(stores.memory.add(MemoryEntry(ADA, session, f"q{n}", f"a{n}", AT)))
    with psycopg.connect(postgres_url) as conn:
        conn.execute("ALTER TABLE agentloop_helper.memory_entries DROP COLUMN entry_key")
        conn.execute("DROP TABLE agentloop_helper.memory_sessions")
        conn.execute("DROP FUNCTION agentloop_helper.memory_sessions_latest CASCADE")
        conn.execute("DROP INDEX agentloop_helper.memory_entries_by_session")
        conn.execute(
            "CREATE INDEX memory_entries_by_scope ON agentloop_helper.memory_entries "
            "(scope_company, scope_org, scope_team, scope_project, scope_user, scope_session, id)"
        )
        conn.execute("UPDATE agentloop_helper.schema_versions SET version = 1 WHERE name = 'memory'")
    with open_bot(postgres_url) as stores:
        assert [e.assistant_text for e in asyncio.run(stores.memory.recent(ADA, 10, exclude_session="s3"))] == ["a0", "a1", "a2"]
        asyncio.run(stores.memory.add(MemoryEntry(ADA, "s2", "q4", "a4", AT)))
        assert [e.assistant_text for e in asyncio.run(stores.memory.recent(ADA, 2, exclude_session="s1"))] == ["a3", "a4"]


def test_memory_written_before_keyed_adds_is_kept_and_a_keyed_add_is_stored_once_after_the_upgrade(postgres_url: str) -> None:
    """A bot whose memory schema is at version 2 (no `entry_key`) keeps its rows; a keyed add then stores once."""
    with open_bot(postgres_url) as stores:
        for n, session in enumerate(["s1", "s2", "s1"]):
            asyncio.run(stores.memory.add(MemoryEntry(ADA, session, f"q{n}", f"a{n}", AT)))
    with psycopg.connect(postgres_url) as conn:
        conn.execute("ALTER TABLE agentloop_helper.memory_entries DROP COLUMN entry_key")
        conn.execute("UPDATE agentloop_helper.schema_versions SET version = 2 WHERE name = 'memory'")
    with capture_logs() as logs, open_bot(postgres_url) as stores:
        for _ in range(2):
            asyncio.run(stores.memory.add(MemoryEntry(ADA, "s2", "q3", "a3", AT), key="m3"))
        assert [e.assistant_text for e in asyncio.run(stores.memory.recent(ADA, 10))] == ["a0", "a1", "a2", "a3"]
        assert [e.assistant_text for e in asyncio.run(stores.memory.recent(ADA, 10, exclude_session="s1"))] == ["a1", "a3"]
    assert [(log["store"], log["version"]) for log in logs if log["event"] == "stores.schema.step"] == [("memory", 3), ("memory", 4)]


def test_every_pooled_connection_scans_the_hnsw_graph_at_ef_search_100(stores: Stores) -> None:
    """pgvector's default breadth of 40 gave recall@10 0.825 over 100k notes; every connection
    of the pool is set to `EF_SEARCH` (100) once, so a search needs no transaction of its own."""
    db = stores.rag._db  # type: ignore[attr-defined]

    async def shown() -> object:
        async with db.pool.connection() as conn:
            row = await (await conn.execute("SHOW hnsw.ef_search")).fetchone()
            return row[0]

    assert db.wait(shown()) == str(EF_SEARCH) == "100"


def test_no_store_table_has_a_one_column_index_another_of_its_indexes_already_leads_with(postgres_url: str) -> None:
    """Each index is written on every insert: one an index already covers only slows a turn's writes."""
    open_bot(postgres_url, bot="indexed").close()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT i.indexrelid::regclass::text, i.indrelid, i.indkey::int2[], i.indisunique FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
        ).fetchall()
    redundant = [
        name for name, table, keys, unique in rows
        if len(keys) == 1 and not unique
        and any(other != name and more[0] == keys[0] and of == table for other, of, more, _ in rows)
    ]
    assert redundant == []
