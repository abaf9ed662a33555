"""Tests for agentloop.tasks.lifecycle: the task states, notes cleanup and the attempt runner."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentloop import AgentContext, AgentLoop, FinishReason, Session, System, TurnOutcome
from agentloop.adapters import open_stores
from agentloop.tasks.errors import (
    ClaimLostError,
    InvalidTaskTransitionError,
    UnknownTaskError,
    UnknownTemplateError,
)
from agentloop.scopes import history_scope
from agentloop.testing import FakeClock
from agentloop.testing.tasks import task_loop
from agentloop.tasks import (
    DEFAULT_LEASE,
    AttemptNotes,
    AttemptRunner,
    Evaluator,
    TaskLifecycle,
    TaskState,
    TaskStatus,
    TemplateRegistry,
    format_reply,
)
from agentloop.tasks.evaluator import TaskTrace
from agentloop.tasks.results import TaskResult


@pytest.fixture
def lifecycle(tmp_path: Path) -> Iterator[TaskLifecycle]:
    clock = FakeClock()
    with open_stores(tmp_path) as stores:
        yield TaskLifecycle(stores.tasks, AttemptNotes(stores.attempt_notes, clock=clock), clock=clock)


def test_the_happy_path_ends_done_with_notes_removed(lifecycle: TaskLifecycle) -> None:
    asyncio.run(lifecycle.create("t1", "fix", {"file": "a.py"}))
    claimed = asyncio.run(lifecycle.claim("t1", "agent-1"))
    assert (claimed.state, claimed.claimed_by, claimed.attempts) == (TaskState.CLAIMED, "agent-1", 1)
    asyncio.run(lifecycle.notes.save("t1", agent="agent-1", output="did it", turns=1))
    assert asyncio.run(lifecycle.submit("t1")).state is TaskState.PROVISIONAL
    assert asyncio.run(lifecycle.notes.read("t1")) is not None
    assert asyncio.run(lifecycle.accept("t1")).state is TaskState.DONE
    assert asyncio.run(lifecycle.notes.read("t1")) is None
    assert asyncio.run(lifecycle.get("t1")).inputs == {"file": "a.py"}


def test_reject_and_release_go_back_to_incoming_keeping_notes(lifecycle: TaskLifecycle) -> None:
    asyncio.run(lifecycle.create("t1", "fix"))
    asyncio.run(lifecycle.claim("t1", "a"))
    asyncio.run(lifecycle.notes.save("t1", agent="a", output="x", turns=1))
    assert asyncio.run(lifecycle.release("t1")).state is TaskState.INCOMING
    asyncio.run(lifecycle.claim("t1", "b"))
    asyncio.run(lifecycle.submit("t1"))
    assert asyncio.run(lifecycle.reject("t1")).state is TaskState.INCOMING
    assert asyncio.run(lifecycle.notes.read("t1")) is not None
    assert asyncio.run(lifecycle.get("t1")).attempts == 2


def test_complete_is_the_direct_path_to_done(lifecycle: TaskLifecycle) -> None:
    asyncio.run(lifecycle.create("t1", "fix"))
    asyncio.run(lifecycle.claim("t1", "a"))
    asyncio.run(lifecycle.notes.save("t1", agent="a", output="x", turns=1))
    assert asyncio.run(lifecycle.complete("t1")).state is TaskState.DONE
    assert asyncio.run(lifecycle.notes.read("t1")) is None


def test_failed_keeps_notes(lifecycle: TaskLifecycle) -> None:
    asyncio.run(lifecycle.create("t1", "fix"))
    asyncio.run(lifecycle.claim("t1", "a"))
    asyncio.run(lifecycle.notes.save("t1", agent="a", output="x", turns=1))
    assert asyncio.run(lifecycle.fail("t1")).state is TaskState.FAILED
    assert asyncio.run(lifecycle.notes.read("t1")) is not None


@pytest.mark.parametrize(
    ("move", "message"),
    [
        ("accept", "task 't1' is incoming, so it cannot move to done; that needs one of: provisional"),
        ("submit", "task 't1' is incoming, so it cannot move to provisional; that needs one of: claimed"),
        ("reject", "is incoming, so it cannot move to incoming"),
    ],
)
def test_a_move_the_state_does_not_allow_is_refused(lifecycle: TaskLifecycle, move: str, message: str) -> None:
    asyncio.run(lifecycle.create("t1", "fix"))
    with pytest.raises(InvalidTaskTransitionError, match=message):
        asyncio.run(getattr(lifecycle, move)("t1"))
    assert asyncio.run(lifecycle.get("t1")).state is TaskState.INCOMING


def test_unknown_and_duplicate_tasks(lifecycle: TaskLifecycle) -> None:
    with pytest.raises(UnknownTaskError, match="no task with id 'nope'"):
        asyncio.run(lifecycle.claim("nope", "a"))
    asyncio.run(lifecycle.create("t1", "fix"))
    with pytest.raises(ValueError, match="already exists"):
        asyncio.run(lifecycle.create("t1", "fix"))


def test_claim_next_takes_the_oldest_incoming_task(lifecycle: TaskLifecycle) -> None:
    for task_id in ("t1", "t2"):
        asyncio.run(lifecycle.create(task_id, "fix"))
    first = asyncio.run(lifecycle.claim_next("a"))
    second = asyncio.run(lifecycle.claim_next("b"))
    assert (first and first.id, second and second.id) == ("t1", "t2")
    assert asyncio.run(lifecycle.claim_next("c")) is None


def test_the_runner_saves_notes_on_failure_and_success(lifecycle: TaskLifecycle) -> None:
    registry = TemplateRegistry()
    registry.register_string('<task name="fix" type="atomic"><description>Fix {{file}}</description></task>')
    replies = [format_reply("tried", status=TaskStatus.FAILED, reason="red"), format_reply("fixed")]
    loop, system = task_loop(replies)
    commits = iter([0, 0, 5, 7])
    runner = AttemptRunner(lifecycle, Evaluator(registry, loop), agent="impl", count_commits=lambda: next(commits))
    asyncio.run(lifecycle.create("t1", "fix", {"file": "a.py"}))
    first = asyncio.run(runner.run("t1"))
    assert (first.attempt, first.state, first.result) == (1, TaskState.INCOMING, None)
    assert first.error is not None and "red" in str(first.error)
    second = asyncio.run(runner.run("t1"))
    assert (second.attempt, second.state) == (2, TaskState.PROVISIONAL)
    assert second.result is not None and second.result.content == "fixed"
    notes = asyncio.run(lifecycle.notes.read("t1")) or ""
    assert "Turns: 1 | Commits: 0" in notes and "Turns: 1 | Commits: 2" in notes
    assert "FAILED (task_reported_failure): red" in notes
    assert system.turns[0].previous_notes is None
    assert system.turns[1].previous_notes is not None and "## Attempt 1 — impl" in system.turns[1].previous_notes


def test_the_runner_refuses_an_unknown_template_without_claiming(lifecycle: TaskLifecycle) -> None:
    asyncio.run(lifecycle.create("t1", "missing"))
    runner = AttemptRunner(lifecycle, Evaluator(TemplateRegistry(), task_loop([])[0]), agent="a")
    with pytest.raises(UnknownTemplateError):
        asyncio.run(runner.run("t1"))
    assert asyncio.run(lifecycle.get("t1")).state is TaskState.INCOMING


class _AbortingEvaluator(Evaluator):
    """Runs the real evaluation, then `abort()` ends the attempt the way a bug or a
    cancellation would: with an exception that is not a TaskError."""

    def __init__(self, registry: TemplateRegistry, replies: list[str], abort: Callable[[], Awaitable[None]]) -> None:
        super().__init__(registry, task_loop(replies)[0])
        self.abort = abort

    async def run(
        self,
        name: str,
        inputs: Mapping[str, str | tuple[str, ...]] | None = None,
        *,
        context: Mapping[str, str] | None = None,
        previous_notes: str | None = None,
        trace: TaskTrace | None = None,
    ) -> TaskResult:
        await super().run(name, inputs, context=context, previous_notes=previous_notes, trace=trace)
        await self.abort()
        raise AssertionError("abort() must raise")


async def _raise_bug() -> None:
    raise RuntimeError("disk on fire")


async def _cancel_the_attempt() -> None:
    """A real cancellation: the running attempt's task is cancelled at its next await."""
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("abort", "exception", "ending"),
    [
        (_raise_bug, RuntimeError, "ABORTED (RuntimeError): disk on fire"),
        (_cancel_the_attempt, asyncio.CancelledError, "ABORTED (CancelledError)"),
    ],
    ids=["runtime-error", "cancelled"],
)
def test_an_aborted_attempt_saves_its_notes_and_releases_the_task(
    lifecycle: TaskLifecycle,
    abort: Callable[[], Awaitable[None]],
    exception: type[BaseException],
    ending: str,
) -> None:
    """Notes after every attempt; an exception that is not a TaskError must not
    leave the task claimed forever."""
    registry = TemplateRegistry()
    registry.register_string('<task name="fix" type="atomic"><description>Fix {{file}}</description></task>')
    runner = AttemptRunner(lifecycle, _AbortingEvaluator(registry, ["half done"], abort), agent="impl")
    asyncio.run(lifecycle.create("t1", "fix", {"file": "a.py"}))
    with pytest.raises(exception):
        asyncio.run(runner.run("t1"))
    record = asyncio.run(lifecycle.get("t1"))
    assert (record.state, record.attempts) == (TaskState.INCOMING, 1)
    notes = asyncio.run(lifecycle.notes.read("t1")) or ""
    assert "## Attempt 1 — impl" in notes and "Turns: 1 | Commits: 0" in notes
    assert "half done" in notes and ending in notes


# --- leases -----------------------------------------------------------------------------

class _Turn(System):
    """Answers a task turn after `during()` ran: a stand-in for a slow model or tool."""

    order = 30
    writes = (TurnOutcome,)

    def __init__(self, during: Callable[[], Awaitable[None]]) -> None:
        self.during = during

    async def process(self, ctx: AgentContext) -> None:
        await self.during()
        ctx.set(TurnOutcome(FinishReason.SUCCESS, assistant_text="done", auto_mode=True))


def _fix_registry() -> TemplateRegistry:
    registry = TemplateRegistry()
    registry.register_string('<task name="fix" type="atomic"><description>Fix {{file}}</description></task>')
    return registry


def test_a_claim_held_by_a_worker_that_died_returns_to_the_queue_with_its_notes(lifecycle: TaskLifecycle) -> None:
    clock = lifecycle.clock
    assert isinstance(clock, FakeClock)
    asyncio.run(lifecycle.create("t1", "fix", {"file": "a.py"}))
    asyncio.run(lifecycle.claim("t1", "worker-a"))
    asyncio.run(lifecycle.notes.save("t1", agent="worker-a", output="found the bug in a.py", turns=1))
    notes = asyncio.run(lifecycle.notes.read("t1"))
    # worker-a dies here: it never renews, submits or releases.
    clock.advance(DEFAULT_LEASE.total_seconds() - 1)
    assert asyncio.run(lifecycle.claim_next("worker-b")) is None
    clock.advance(1)
    loop, system = task_loop(["fixed"])
    outcome = asyncio.run(AttemptRunner(lifecycle, Evaluator(_fix_registry(), loop), agent="worker-b").run("t1"))
    assert (outcome.state, outcome.attempt) == (TaskState.PROVISIONAL, 2)
    assert asyncio.run(lifecycle.get("t1")).attempts == 2
    assert system.turns[0].previous_notes == notes
    assert (asyncio.run(lifecycle.notes.read("t1")) or "").startswith(notes or "missing")


def test_claim_next_takes_over_an_expired_claim(lifecycle: TaskLifecycle) -> None:
    asyncio.run(lifecycle.create("t1", "fix"))
    asyncio.run(lifecycle.claim("t1", "worker-a"))
    assert isinstance(lifecycle.clock, FakeClock)
    lifecycle.clock.advance(DEFAULT_LEASE.total_seconds())
    taken = asyncio.run(lifecycle.claim_next("worker-b"))
    assert taken is not None and (taken.id, taken.claimed_by, taken.attempts) == ("t1", "worker-b", 2)
    assert taken.lease_expires_at == lifecycle.clock.now() + DEFAULT_LEASE
    with pytest.raises(ClaimLostError, match="no longer claimed by 'worker-a' .it is claimed, claimed by 'worker-b'"):
        asyncio.run(lifecycle.submit("t1", agent="worker-a"))


def test_a_long_attempt_that_keeps_renewing_is_not_reclaimed(lifecycle: TaskLifecycle) -> None:
    clock = lifecycle.clock
    assert isinstance(clock, FakeClock)
    taken: list[object] = []

    async def twelve_minutes_of_work() -> None:
        for _ in range(4):
            clock.advance(180)
            await asyncio.sleep(0.03)  # the renewal (every 0.005 s) runs meanwhile
            taken.append(await lifecycle.claim_next("worker-b"))

    asyncio.run(lifecycle.create("t1", "fix", {"file": "a.py"}))
    runner = AttemptRunner(
        lifecycle, Evaluator(_fix_registry(), AgentLoop([_Turn(twelve_minutes_of_work)])), agent="worker-a",
        renew_every=0.005,
    )
    outcome = asyncio.run(runner.run("t1"))
    assert taken == [None] * 4
    assert (outcome.state, outcome.result and outcome.result.content) == (TaskState.PROVISIONAL, "done")
    assert asyncio.run(lifecycle.get("t1")).attempts == 1


def test_an_attempt_that_lost_its_claim_is_stopped_keeps_its_notes_and_says_so(lifecycle: TaskLifecycle) -> None:
    """Once a renewal finds the task claimed by another worker, the attempt stops at once:
    two workers never go on running one task."""
    clock = lifecycle.clock
    assert isinstance(clock, FakeClock)
    went_on: list[bool] = []

    async def stall_past_the_lease() -> None:
        clock.advance(DEFAULT_LEASE.total_seconds() + 1)  # no renewal came in time
        assert await lifecycle.claim_next("worker-b") is not None
        await asyncio.sleep(10)  # worker-a's model call or script, still running
        went_on.append(True)

    asyncio.run(lifecycle.create("t1", "fix", {"file": "a.py"}))
    runner = AttemptRunner(
        lifecycle, Evaluator(_fix_registry(), AgentLoop([_Turn(stall_past_the_lease)])), agent="worker-a",
        renew_every=0.01,
    )
    started = time.monotonic()
    with pytest.raises(ClaimLostError, match="no longer claimed by 'worker-a'"):
        asyncio.run(runner.run("t1"))
    assert time.monotonic() - started < 5 and went_on == []
    record = asyncio.run(lifecycle.get("t1"))
    assert (record.state, record.claimed_by) == (TaskState.CLAIMED, "worker-b")
    notes = asyncio.run(lifecycle.notes.read("t1")) or ""
    assert "## Attempt 1 — worker-a" in notes and "ABORTED (claim lost): task 't1' is no longer claimed" in notes


def test_an_attempt_that_lost_its_claim_unnoticed_cannot_submit(lifecycle: TaskLifecycle) -> None:
    clock = lifecycle.clock
    assert isinstance(clock, FakeClock)

    async def stall_past_the_lease() -> None:
        clock.advance(DEFAULT_LEASE.total_seconds() + 1)  # finished before any renewal was due
        assert await lifecycle.claim_next("worker-b") is not None

    asyncio.run(lifecycle.create("t1", "fix", {"file": "a.py"}))
    runner = AttemptRunner(
        lifecycle, Evaluator(_fix_registry(), AgentLoop([_Turn(stall_past_the_lease)])), agent="worker-a",
    )
    with pytest.raises(ClaimLostError, match="no longer claimed by 'worker-a'"):
        asyncio.run(runner.run("t1"))
    assert asyncio.run(lifecycle.get("t1")).claimed_by == "worker-b"
    assert "## Attempt 1 — worker-a" in (asyncio.run(lifecycle.notes.read("t1")) or "")


# --- tenancy ----------------------------------------------------------------------------

_ids = st.sampled_from(["a", "b"])
_tenants = st.lists(
    st.tuples(
        st.sampled_from(["default", "c2"]),
        st.builds(Session, id=st.sampled_from(["s1", "s2"]), user_id=st.none() | _ids, project_id=st.none() | _ids,
                  team_id=st.none() | _ids, org_id=st.none() | st.sampled_from(["acme", "globex"])),
    ),
    min_size=2, max_size=5,
)


@settings(max_examples=30, deadline=None)
@given(tenants=_tenants)
@example([("default", Session("s1", project_id="a", org_id="acme")), ("c2", Session("s1", project_id="a", org_id="acme"))])
def test_a_task_is_seen_and_claimed_only_within_its_chain(tenants: list[tuple[str, Session]]) -> None:
    """I11: a task created in one chain is never read, listed or claimed from a chain of
    another company, org, team or project sharing the store, whichever ids repeat; the
    same chain still sees it."""
    with tempfile.TemporaryDirectory() as directory:
        stores = open_stores(directory)
        clock = FakeClock()
        lifecycles = [
            TaskLifecycle(stores.tasks, AttemptNotes(stores.attempt_notes), session=tenant, company_id=company, clock=clock)
            for company, tenant in tenants
        ]
        for index, lifecycle in enumerate(lifecycles):
            created = asyncio.run(lifecycle.create(f"t{index}", "fix", {"secret": f"of tenant {index}"}))
            assert created.chain == history_scope(tenants[index][1], tenants[index][0])
        for reader in lifecycles:
            own = {f"t{i}" for i, writer in enumerate(lifecycles) if writer.scope == reader.scope}
            assert {r.id for r in asyncio.run(reader.in_state(TaskState.INCOMING))} == own
            for index in range(len(lifecycles)):
                if f"t{index}" not in own:
                    with pytest.raises(UnknownTaskError):
                        asyncio.run(reader.get(f"t{index}"))
                    with pytest.raises(UnknownTaskError):
                        asyncio.run(reader.claim(f"t{index}", "intruder"))
        first = lifecycles[0]
        claimed = []
        while (record := asyncio.run(first.claim_next("worker"))) is not None:
            claimed.append(record.id)
        assert set(claimed) == {f"t{i}" for i, other in enumerate(lifecycles) if other.scope == first.scope}
        stores.close()


def test_a_project_id_reused_under_another_org_is_another_queue(tmp_path: Path) -> None:
    stores = open_stores(tmp_path)
    store, notes = stores.tasks, AttemptNotes(stores.attempt_notes)
    acme = TaskLifecycle(store, notes, session=Session("s", user_id="ann", project_id="shop", org_id="acme"))
    globex = TaskLifecycle(store, notes, session=Session("s", user_id="ann", project_id="shop", org_id="globex"))
    teammate = TaskLifecycle(store, notes, session=Session("s2", user_id="bob", project_id="shop", org_id="acme"))
    asyncio.run(acme.create("t1", "fix", {"file": "acme-secrets.py"}))
    assert asyncio.run(globex.claim_next("globex-worker")) is None and asyncio.run(globex.in_state(TaskState.INCOMING)) == ()
    claimed = asyncio.run(teammate.claim_next("acme-worker"))
    assert claimed is not None and claimed.inputs == {"file": "acme-secrets.py"}
    stores.close()


def test_the_runner_refuses_an_evaluator_of_another_chain(lifecycle: TaskLifecycle) -> None:
    evaluator = Evaluator(TemplateRegistry(), task_loop([])[0], session=Session("s", org_id="globex"))
    with pytest.raises(ValueError, match="outside the task lifecycle's chain"):
        AttemptRunner(lifecycle, evaluator, agent="a")
