"""The task store suite: records, compare-and-set moves, claims and leases, tenant isolation, concurrent writers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import attrs
import pytest

from agentloop.ports.stores import Stores
from agentloop.ports.tasks import TaskRecord, TaskState
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import AT, LATER, Backend, at_once, namesakes, run


class TaskStoreTests(Backend):
    """`TaskStore`: task records by id within a scope, moved only by compare-and-set."""

    ACME = Scope("acme", "o1", "t1", "p1")

    def record(self, task_id: str, scope: Scope | None = None, created: datetime = AT) -> TaskRecord:
        scope = scope or self.ACME
        return TaskRecord(task_id, "fix", {"k": "v", "path": "a.py"}, TaskState.INCOMING, created, created,
                          scope=scope, chain=attrs.evolve(scope, user_id="ann", session_id="s1"))

    def claim(self, stores: Stores, task_id: str, agent: str = "x", scope: Scope | None = None) -> TaskRecord | None:
        return run(stores.tasks.move(task_id, scope or self.ACME, (TaskState.INCOMING,), TaskState.CLAIMED,
                                     updated_at=AT, claimed_by=agent, count_attempt=True, lease_expires_at=LATER))

    def test_a_task_comes_back_whole_with_its_claim_and_lease_after_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        run(stores.tasks.add(self.record("a")))
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")
        claimed = self.claim(stores, "a")
        expected = attrs.evolve(self.record("a"), state=TaskState.CLAIMED, claimed_by="x", attempts=1, lease_expires_at=LATER)
        assert claimed == expected
        stores.close()
        with open_backend() as again:
            assert run(again.tasks.get("a", self.ACME)) == expected
            assert run(again.tasks.get("missing", self.ACME)) is None

    def test_a_second_task_with_the_same_id_is_refused(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        with pytest.raises(ValueError):
            run(stores.tasks.add(attrs.evolve(self.record("a"), template="other")))
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")

    def test_a_move_from_another_state_changes_nothing(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        assert run(stores.tasks.move("a", self.ACME, (TaskState.PROVISIONAL, TaskState.CLAIMED), TaskState.DONE,
                                     updated_at=LATER, claimed_by=None)) is None
        assert run(stores.tasks.move("missing", self.ACME, (TaskState.INCOMING,), TaskState.DONE,
                                     updated_at=LATER, claimed_by=None)) is None
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")

    def test_in_state_lists_the_tasks_of_a_state_oldest_first(self, stores: Stores) -> None:
        for n, task_id in enumerate(("c", "a", "b", "d")):
            run(stores.tasks.add(self.record(task_id, created=AT + timedelta(seconds=n))))
        self.claim(stores, "a")
        assert [r.id for r in run(stores.tasks.in_state(TaskState.INCOMING, self.ACME))] == ["c", "b", "d"]
        assert [r.id for r in run(stores.tasks.in_state(TaskState.CLAIMED, self.ACME))] == ["a"]
        assert run(stores.tasks.in_state(TaskState.DONE, self.ACME)) == ()

    def test_a_move_guarded_by_the_holder_or_the_last_update_fails_when_either_changed(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        self.claim(stores, "a")
        claimed = (TaskState.CLAIMED,)
        assert run(stores.tasks.move("a", self.ACME, claimed, TaskState.PROVISIONAL, updated_at=LATER,
                                     claimed_by=None, held_by="y")) is None
        assert run(stores.tasks.move("a", self.ACME, claimed, TaskState.INCOMING, updated_at=LATER,
                                     claimed_by=None, unchanged_since=LATER)) is None
        moved = run(stores.tasks.move("a", self.ACME, claimed, TaskState.INCOMING, updated_at=LATER,
                                      claimed_by=None, held_by="x", unchanged_since=AT))
        assert moved is not None
        assert (moved.state, moved.claimed_by, moved.updated_at, moved.lease_expires_at, moved.attempts) == (
            TaskState.INCOMING, None, LATER, None, 1,
        )

    def test_a_renewal_moves_the_lease_and_the_last_update(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        self.claim(stores, "a")
        renewed_until = LATER + timedelta(minutes=5)
        renewed = run(stores.tasks.move("a", self.ACME, (TaskState.CLAIMED,), TaskState.CLAIMED, updated_at=LATER,
                                        claimed_by="x", held_by="x", unchanged_since=AT, lease_expires_at=renewed_until))
        assert renewed is not None and (renewed.lease_expires_at, renewed.updated_at, renewed.attempts) == (
            renewed_until, LATER, 1,
        )
        stale = run(stores.tasks.move("a", self.ACME, (TaskState.CLAIMED,), TaskState.INCOMING, updated_at=LATER,
                                      claimed_by=None, unchanged_since=AT))
        assert stale is None and run(stores.tasks.get("a", self.ACME)) == renewed

    def test_no_namesake_in_another_chain_reads_lists_or_moves_the_task(self, stores: Stores) -> None:
        """I11: the same project id under another company, org or team is another tenant."""
        run(stores.tasks.add(self.record("a")))
        for other in namesakes(self.ACME):
            assert run(stores.tasks.get("a", other)) is None
            assert run(stores.tasks.in_state(TaskState.INCOMING, other)) == ()
            assert self.claim(stores, "a", scope=other) is None
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")

    def test_of_agents_claiming_one_task_at_once_exactly_one_wins(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        claims = at_once(lambda agent: stores.tasks.move(
            "a", self.ACME, (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=AT, claimed_by=agent, count_attempt=True
        ), [f"agent-{n}" for n in range(8)])
        winners = [claim for claim in claims if claim is not None]
        assert len(winners) == 1
        stored = run(stores.tasks.get("a", self.ACME))
        assert stored is not None and (stored.claimed_by, stored.attempts) == (winners[0].claimed_by, 1)

    def test_concurrent_adds_lose_nothing(self, stores: Stores) -> None:
        records = [self.record(f"task-{n}", created=AT + timedelta(seconds=n)) for n in range(16)]
        at_once(stores.tasks.add, records)
        listed = run(stores.tasks.in_state(TaskState.INCOMING, self.ACME))
        assert sorted(listed, key=lambda r: r.created_at) == records
