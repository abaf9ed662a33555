"""The session (history) store suite: order, tails, reopening, tenant isolation, keyed and concurrent appends."""

from __future__ import annotations

from collections.abc import Callable

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.ports.stores import Stores
from agentloop.messages import ChatMessage, ToolCall
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import CHAIN, Backend, unique, at_once, namesakes, run


class SessionStoreTests(Backend):
    """`SessionStore`: each history scope's messages, oldest first, as appended."""

    def test_a_history_never_written_is_empty(self, stores: Stores) -> None:
        assert run(stores.sessions.recent(CHAIN, 10)) == ()

    def test_recent_is_the_newest_messages_oldest_first(self, stores: Stores) -> None:
        other = attrs.evolve(CHAIN, session_id="s2")
        messages = [ChatMessage.user(f"q{i}") if i % 2 == 0 else ChatMessage.assistant(f"a{i}") for i in range(6)]
        run(stores.sessions.append(CHAIN, messages[:3]))
        run(stores.sessions.append(other, [ChatMessage.user("other")]))
        run(stores.sessions.append(CHAIN, messages[3:]))
        run(stores.sessions.append(CHAIN, []))
        assert run(stores.sessions.recent(CHAIN, 4)) == tuple(messages[2:])
        assert run(stores.sessions.recent(CHAIN, 100)) == tuple(messages)
        assert run(stores.sessions.recent(CHAIN, 0)) == ()
        assert run(stores.sessions.recent(other, 10)) == (ChatMessage.user("other"),)

    def test_count_is_the_history_length_in_its_scope_after_appends_and_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        """A message's position is its place in this count, so a summary can say what it covers (I11: per scope)."""
        assert run(stores.sessions.count(CHAIN)) == 0
        run(stores.sessions.append(CHAIN, [ChatMessage.user("q1"), ChatMessage.assistant("a1")]))
        assert run(stores.sessions.count(CHAIN)) == 2
        run(stores.sessions.append(CHAIN, [ChatMessage.user("q2")]))
        for other in namesakes(CHAIN):
            run(stores.sessions.append(other, [ChatMessage.user("elsewhere")]))
        assert run(stores.sessions.count(CHAIN)) == 3
        stores.close()
        with open_backend() as again:
            assert run(again.sessions.count(CHAIN)) == 3
            assert all(run(again.sessions.count(other)) == 1 for other in namesakes(CHAIN))

    def test_tool_calls_and_results_come_back_after_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        call = ToolCall("c1", "search", {"q": "x", "n": [1, 2], "deep": {"a": None}})
        messages = [
            ChatMessage.user("find x"),
            ChatMessage.assistant(None, (call,)),
            ChatMessage.tool("c1", "search", "found"),
            ChatMessage.assistant("x is here"),
        ]
        run(stores.sessions.append(CHAIN, messages))
        stores.close()
        with open_backend() as again:
            assert run(again.sessions.recent(CHAIN, 10)) == tuple(messages)

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(st.lists(st.tuples(st.sampled_from("ab"), st.text(max_size=12)), max_size=12), st.integers(0, 14))
    def test_recent_is_the_tail_of_what_was_appended(
        self, stores: Stores, appended: list[tuple[str, str]], limit: int
    ) -> None:
        """I5: history keeps each session's messages in the order appended, so the canonical
        answer stored last is the one read back. Each example writes sessions of its own (the
        store is shared by the examples, and by every backend's class that inherits this test)."""
        run_id = next(unique)
        for session, text in appended:
            run(stores.sessions.append(Scope(session_id=f"{session}{run_id}"), [ChatMessage.user(text)]))
        for session in "ab":
            mine = [ChatMessage.user(text) for s, text in appended if s == session]
            expected = tuple(mine[-limit:]) if limit else ()
            assert run(stores.sessions.recent(Scope(session_id=f"{session}{run_id}"), limit)) == expected

    def test_no_namesake_in_another_chain_sees_the_history(self, stores: Stores) -> None:
        """I11: the same session id (and every other id) under another chain is another history."""
        run(stores.sessions.append(CHAIN, [ChatMessage.user("ada's secret")]))
        for other in namesakes(CHAIN):
            run(stores.sessions.append(other, [ChatMessage.user(f"of {other.key}")]))
        assert run(stores.sessions.recent(CHAIN, 10)) == (ChatMessage.user("ada's secret"),)
        for other in namesakes(CHAIN):
            assert run(stores.sessions.recent(other, 10)) == (ChatMessage.user(f"of {other.key}"),)

    def test_concurrent_appends_lose_nothing_and_keep_each_batch_whole(self, stores: Stores) -> None:
        batches = [[ChatMessage.user(f"b{b}m{m}") for m in range(3)] for b in range(16)]
        at_once(lambda batch: stores.sessions.append(CHAIN, batch), batches)
        stored = [m.content for m in run(stores.sessions.recent(CHAIN, 100))]
        runs = sorted(tuple(stored[i : i + 3]) for i in range(0, len(stored), 3))
        assert runs == sorted(tuple(m.content for m in batch) for batch in batches)

    def test_a_keyed_append_is_applied_once_per_history_scope(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        """I13: a turn run again with the same message id writes its history once, and the
        same id in another chain is another message."""
        turn = [ChatMessage.user("hi"), ChatMessage.assistant("hello")]
        other = attrs.evolve(CHAIN, org_id="other")
        assert run(stores.sessions.append(CHAIN, turn, key="m1")) is True
        assert run(stores.sessions.append(CHAIN, turn, key="m1")) is False
        assert run(stores.sessions.append(other, turn, key="m1")) is True
        assert run(stores.sessions.append(CHAIN, [ChatMessage.user("again")], key="m2")) is True
        assert run(stores.sessions.append(CHAIN, [ChatMessage.user("unkeyed")])) is True
        assert run(stores.sessions.append(CHAIN, [ChatMessage.user("unkeyed")])) is True
        stores.close()
        with open_backend() as again:
            assert run(again.sessions.append(CHAIN, turn, key="m1")) is False  # keys outlive the process
            assert [m.content for m in run(again.sessions.recent(CHAIN, 10))] == ["hi", "hello", "again", "unkeyed", "unkeyed"]
            assert [m.content for m in run(again.sessions.recent(other, 10))] == ["hi", "hello"]

    def test_of_writers_appending_one_key_at_once_exactly_one_applies_it(self, stores: Stores) -> None:
        """I13: two workers finishing the same message's turn at once write its history once."""
        turn = [ChatMessage.user("hi"), ChatMessage.assistant("hello")]
        applied = at_once(lambda key: stores.sessions.append(CHAIN, turn, key=key), ["m1"] * 8)
        assert applied.count(True) == 1 and run(stores.sessions.recent(CHAIN, 10)) == tuple(turn)
