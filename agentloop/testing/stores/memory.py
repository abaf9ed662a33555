"""The memory store suite: recent entries per scope, tenant isolation, reopening, concurrent adds."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta


from agentloop.ports.stores import Stores
from agentloop.ports.stores import MemoryEntry
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import AT, CHAIN, Backend, at_once, namesakes, run


class MemoryStoreTests(Backend):
    """`MemoryStore`: a scope's remembered exchanges, newest window oldest first."""

    @staticmethod
    def entry(scope: Scope, session: str, n: int) -> MemoryEntry:
        return MemoryEntry(scope, session, f"q{n}", f"a{n}", AT + timedelta(minutes=n))

    def test_recent_entries_of_a_scope_oldest_first_optionally_without_one_session(self, stores: Stores) -> None:
        ada, bob = Scope(user_id="ada"), Scope(user_id="bob")
        for n in range(5):
            run(stores.memory.add(self.entry(ada, "s1" if n < 3 else "s2", n)))
        run(stores.memory.add(self.entry(bob, "s9", 9)))
        assert [e.assistant_text for e in run(stores.memory.recent(ada, 3))] == ["a2", "a3", "a4"]
        assert [e.assistant_text for e in run(stores.memory.recent(ada, 10, exclude_session="s2"))] == ["a0", "a1", "a2"]
        assert [e.assistant_text for e in run(stores.memory.recent(ada, 2, exclude_session="s2"))] == ["a1", "a2"], (
            "the limit counts the entries left after the exclusion"
        )
        assert run(stores.memory.recent(ada, 1)) == (self.entry(ada, "s2", 4),)
        assert run(stores.memory.recent(ada, 0)) == ()
        assert run(stores.memory.recent(bob, 10)) == (self.entry(bob, "s9", 9),)
        assert run(stores.memory.recent(Scope(user_id="nobody"), 5)) == ()

    def test_no_namesake_in_another_chain_sees_the_memory(self, stores: Stores) -> None:
        """I11: the same user id in another company, org, team or project remembers nothing of ours."""
        run(stores.memory.add(self.entry(CHAIN, "s1", 1)))
        for other in namesakes(CHAIN):
            assert run(stores.memory.recent(other, 10)) == ()
        assert run(stores.memory.recent(CHAIN, 10)) == (self.entry(CHAIN, "s1", 1),)

    def test_a_keyed_add_stored_twice_is_stored_once_in_its_scope_only(self, stores: Stores) -> None:
        """A turn run again adds its entry under the same key: stored once; the same key in a
        namesake scope is another entry, and adds without a key are all stored."""
        run(stores.memory.add(self.entry(CHAIN, "s1", 1), key="m1"))
        run(stores.memory.add(self.entry(CHAIN, "s1", 1), key="m1"))
        run(stores.memory.add(self.entry(CHAIN, "s1", 2), key="m1"))
        assert run(stores.memory.recent(CHAIN, 10)) == (self.entry(CHAIN, "s1", 1),)
        others = namesakes(CHAIN)
        for other in others:
            run(stores.memory.add(self.entry(other, "s1", 3), key="m1"))
            assert run(stores.memory.recent(other, 10)) == (self.entry(other, "s1", 3),)
        run(stores.memory.add(self.entry(CHAIN, "s1", 4), key="m2"))
        run(stores.memory.add(self.entry(CHAIN, "s1", 5)))
        run(stores.memory.add(self.entry(CHAIN, "s1", 5)))
        assert [e.assistant_text for e in run(stores.memory.recent(CHAIN, 10))] == ["a1", "a4", "a5", "a5"]

    def test_concurrent_keyed_adds_of_one_key_store_one_entry(self, stores: Stores) -> None:
        at_once(lambda n: stores.memory.add(self.entry(CHAIN, "s1", n), key="m1"), range(8))
        assert len(run(stores.memory.recent(CHAIN, 10))) == 1

    def test_entries_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        run(stores.memory.add(self.entry(CHAIN, "s1", 1)))
        stores.close()
        with open_backend() as again:
            assert run(again.memory.recent(CHAIN, 5)) == (self.entry(CHAIN, "s1", 1),)

    def test_concurrent_adds_lose_nothing(self, stores: Stores) -> None:
        entries = [self.entry(CHAIN, f"s{n % 3}", n) for n in range(24)]
        at_once(stores.memory.add, entries)
        assert sorted(run(stores.memory.recent(CHAIN, 100)), key=lambda e: e.created_at) == entries
