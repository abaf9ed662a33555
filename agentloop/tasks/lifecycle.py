"""The task lifecycle and running one attempt of a task with its notes.

    incoming → claimed → provisional → done      (accept: notes removed)
                 │           └──────→ incoming   (reject: notes kept for the retry)
                 ├──────────────────→ incoming   (release after a failed attempt,
                 │                                 or the claim's lease expired)
                 ├──────────────────→ done       (complete directly: notes removed)
                 └──────────────────→ failed     (give up; notes kept)

Notes are removed only when a task reaches done; every other move keeps them. A claim
holds a lease: an agent that stops renewing it (it died) loses the task to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from datetime import timedelta

import attrs

from agentloop._log import get_logger
from agentloop.context import Session
from agentloop.tasks.errors import ClaimLostError, InvalidTaskTransitionError, TaskError, UnknownTaskError
from agentloop.ports.clock import Clock, SystemClock
from agentloop.ports.tasks import TaskRecord, TaskState, TaskStore
from agentloop.scopes import DEFAULT_COMPANY, history_scope, task_scope
from agentloop.tasks.attempt_notes import AttemptNotes, validate_task_id
from agentloop.tasks.evaluator import Evaluator, TaskTrace
from agentloop.tasks.results import TaskResult

_log = get_logger("agentloop.tasks")

DEFAULT_LEASE = timedelta(minutes=5)
"""How long a claim holds without renewal; a running attempt renews it every third of that."""

_I, _C, _P, _D, _F = (
    TaskState.INCOMING,
    TaskState.CLAIMED,
    TaskState.PROVISIONAL,
    TaskState.DONE,
    TaskState.FAILED,
)


class TaskLifecycle:
    """Moves the tasks of one tenant chain between states in a `TaskStore` and keeps their
    attempt notes in step.

    `session` places the caller in a chain: the tasks it creates carry that chain, and it
    sees, claims and moves only the tasks of the same project within the same team and org
    (without a session: the chain with no org, team or project), of its `company_id`
    (the deployment, as the bot's). A claim holds for `lease` unless its agent renews it; `claim` and `claim_next` first return expired claims to
    incoming.
    """

    def __init__(
        self,
        store: TaskStore,
        notes: AttemptNotes,
        *,
        session: Session | None = None,
        company_id: str = DEFAULT_COMPANY,
        clock: Clock | None = None,
        lease: timedelta = DEFAULT_LEASE,
    ) -> None:
        if lease <= timedelta(0):
            raise ValueError(f"a claim's lease must be longer than zero, not {lease}")
        self.store = store
        self.notes = notes
        self.clock: Clock = clock or SystemClock()
        self.session = session or Session("tasks")
        self.company_id = company_id
        self.scope = task_scope(self.session, company_id)
        self.lease = lease

    async def create(self, task_id: str, template: str, inputs: Mapping[str, str] | None = None) -> TaskRecord:
        """A new incoming task that will run `template` with `inputs`, carrying the session's chain."""
        validate_task_id(task_id)
        now = self.clock.now()
        record = TaskRecord(
            task_id, template, dict(inputs or {}), _I, now, now, scope=self.scope, chain=history_scope(self.session, self.company_id)
        )
        await self.store.add(record)
        _log.info("task.created", task_id=task_id, template=template)
        return record

    async def get(self, task_id: str) -> TaskRecord:
        """The task, if it is this chain's; `UnknownTaskError` otherwise."""
        record = await self.store.get(validate_task_id(task_id), self.scope)
        if record is None:
            raise UnknownTaskError(task_id)
        return record

    async def in_state(self, state: TaskState) -> tuple[TaskRecord, ...]:
        """This chain's tasks in `state`, oldest first."""
        return await self.store.in_state(state, self.scope)

    async def claim(self, task_id: str, agent: str) -> TaskRecord:
        """Claim an incoming task for `agent`, holding it for one lease."""
        await self.expire_leases()
        return await self._move(task_id, (_I,), _C, claimed_by=agent, count_attempt=True)

    async def claim_next(self, agent: str) -> TaskRecord | None:
        """Claim the oldest incoming task, or None if there is none."""
        await self.expire_leases()
        for record in await self.in_state(_I):
            now = self.clock.now()
            moved = await self.store.move(
                record.id, self.scope, (_I,), _C,
                updated_at=now, claimed_by=agent, count_attempt=True, lease_expires_at=now + self.lease,
            )
            if moved is not None:
                return moved
        return None

    async def renew(self, task_id: str, agent: str) -> TaskRecord:
        """Extend `agent`'s claim by a full lease; `ClaimLostError` if it no longer holds the task."""
        return await self._move(task_id, (_C,), _C, claimed_by=agent, held_by=agent)

    async def expire_leases(self) -> tuple[TaskRecord, ...]:
        """Return every claim whose lease ran out to incoming, its notes intact.

        A claim recorded before leases existed (no expiry stored) holds for one lease
        from its last update.
        """
        now = self.clock.now()
        returned: list[TaskRecord] = []
        for record in await self.in_state(_C):
            expires = record.lease_expires_at or record.updated_at + self.lease
            if expires > now:
                continue
            moved = await self.store.move(
                record.id, self.scope, (_C,), _I, updated_at=now, claimed_by=None, unchanged_since=record.updated_at
            )
            if moved is not None:
                _log.warning(
                    "task.lease_expired", task_id=record.id, agent=record.claimed_by, lease_expires_at=expires.isoformat()
                )
                returned.append(moved)
        return tuple(returned)

    async def submit(self, task_id: str, *, agent: str | None = None) -> TaskRecord:
        """The attempt produced a result; it waits for acceptance. With `agent`, only if it still holds the claim."""
        return await self._move(task_id, (_C,), _P, held_by=agent)

    async def release(self, task_id: str, *, agent: str | None = None) -> TaskRecord:
        """The attempt failed; the task goes back to incoming with its notes. With `agent`, only if it still holds the claim."""
        return await self._move(task_id, (_C,), _I, held_by=agent)

    async def reject(self, task_id: str) -> TaskRecord:
        """The provisional result was not good enough; retry, keeping the notes."""
        return await self._move(task_id, (_P,), _I)

    async def accept(self, task_id: str) -> TaskRecord:
        """The provisional result is accepted: done, and the notes are removed."""
        record = await self._move(task_id, (_P,), _D)
        await self.notes.remove(task_id)
        return record

    async def complete(self, task_id: str) -> TaskRecord:
        """Finish a claimed task directly: done, and the notes are removed."""
        record = await self._move(task_id, (_C,), _D)
        await self.notes.remove(task_id)
        return record

    async def fail(self, task_id: str) -> TaskRecord:
        """Give up on the task; its notes stay for whoever looks at it."""
        return await self._move(task_id, (_I, _C, _P), _F)

    async def _move(
        self,
        task_id: str,
        allowed: tuple[TaskState, ...],
        to: TaskState,
        *,
        claimed_by: str | None = None,
        count_attempt: bool = False,
        held_by: str | None = None,
    ) -> TaskRecord:
        """Move the task; a move to claimed starts a fresh lease for `claimed_by`."""
        current = await self.get(task_id)
        now = self.clock.now()
        moved = await self.store.move(
            task_id, self.scope, allowed, to,
            updated_at=now, claimed_by=claimed_by, count_attempt=count_attempt,
            lease_expires_at=now + self.lease if to is _C else None, held_by=held_by,
        )
        if moved is None:
            latest = await self.store.get(task_id, self.scope) or current
            if held_by is not None and (latest.state is not _C or latest.claimed_by != held_by):
                raise ClaimLostError(task_id, held_by, latest.state.value, latest.claimed_by)
            raise InvalidTaskTransitionError(task_id, latest.state.value, to.value, tuple(s.value for s in allowed))
        _log.info("task.moved", task_id=task_id, state=to.value, previous=current.state.value)
        return moved


@attrs.frozen
class AttemptOutcome:
    """One attempt: its number, its result or error, and the task's state after it."""

    task_id: str
    attempt: int
    state: TaskState
    result: TaskResult | None = None
    error: TaskError | None = None


class AttemptRunner:
    """Runs one attempt of a task: claim, run with previous notes, save notes, move on.

    Notes are saved after every attempt, whether it succeeded (→ provisional), failed
    (→ incoming) or was aborted by any other exception, cancellation included (→ incoming,
    then the exception propagates). While the attempt runs, a background task renews its
    claim every `renew_every` seconds (default: a third of the lease); once a renewal finds
    the claim lost, the attempt is stopped at once (another agent may be running the task),
    its notes are saved as aborted and `ClaimLostError` says so. `count_commits`,
    if given, is called before and after the attempt and the difference is recorded as
    its commits. The evaluator's session must belong to the lifecycle's chain.
    """

    def __init__(
        self,
        lifecycle: TaskLifecycle,
        evaluator: Evaluator,
        *,
        agent: str,
        count_commits: Callable[[], int] | None = None,
        renew_every: float | None = None,
    ) -> None:
        if task_scope(evaluator.session, lifecycle.company_id) != lifecycle.scope:
            raise ValueError(
                f"the evaluator's session {evaluator.session.id!r} is outside the task lifecycle's chain; "
                f"give both the same session (or sessions of the same org, team and project)"
            )
        self.lifecycle = lifecycle
        self.evaluator = evaluator
        self.agent = agent
        self.count_commits = count_commits
        self.renew_every = lifecycle.lease.total_seconds() / 3 if renew_every is None else renew_every
        if self.renew_every <= 0:
            raise ValueError(f"renew_every must be a number of seconds above 0, not {renew_every}")

    async def run(self, task_id: str) -> AttemptOutcome:
        """Run the task once; an unknown template raises before the task is claimed."""
        self.evaluator.registry.get((await self.lifecycle.get(task_id)).template)
        record = await self.lifecycle.claim(task_id, self.agent)
        notes = self.lifecycle.notes
        commits_before = self.count_commits() if self.count_commits else 0
        trace = TaskTrace()
        result: TaskResult | None = None
        error: TaskError | None = None
        previous = await notes.read(task_id)
        work = asyncio.create_task(self.evaluator.run(record.template, record.inputs, previous_notes=previous, trace=trace))
        renewal = asyncio.create_task(self._keep_claim(task_id, work))
        try:
            result = await work
        except TaskError as exc:
            error = exc
        except BaseException as exc:
            # A bug, a cancellation, an interrupt or a lost claim: the attempt still leaves its
            # notes and the task goes back to incoming instead of staying claimed forever.
            lost = renewal.result() if renewal.done() and not renewal.cancelled() else None
            try:
                if lost is not None:
                    await self._save(task_id, trace, commits_before, f"ABORTED (claim lost): {lost}")
                else:
                    detail = f": {exc}" if str(exc) else ""
                    await self._save(task_id, trace, commits_before, f"ABORTED ({type(exc).__name__}){detail}")
            finally:
                with contextlib.suppress(ClaimLostError):
                    await self.lifecycle.release(task_id, agent=self.agent)
            if lost is not None:
                raise lost from None
            raise
        finally:
            renewal.cancel()
        attempt = await self._save(task_id, trace, commits_before, None if error is None else f"FAILED: {error}")
        if error is not None:
            moved = await self.lifecycle.release(task_id, agent=self.agent)
        else:
            moved = await self.lifecycle.submit(task_id, agent=self.agent)
        return AttemptOutcome(task_id, attempt, moved.state, result, error)

    async def _keep_claim(self, task_id: str, work: asyncio.Task[TaskResult]) -> ClaimLostError:
        """Renew the claim until cancelled; once another agent or the queue has the task,
        cancel `work` so two agents never run it at once, and return why."""
        while True:
            await asyncio.sleep(self.renew_every)
            try:
                await self.lifecycle.renew(task_id, self.agent)
            except ClaimLostError as exc:
                _log.warning("task.claim_lost", task_id=task_id, agent=self.agent, error=str(exc))
                work.cancel()
                return exc
            except Exception:
                _log.exception("task.renew_failed", task_id=task_id, agent=self.agent)

    async def _save(self, task_id: str, trace: TaskTrace, commits_before: int, ending: str | None) -> int:
        """Append the attempt's notes: what it answered, then how it ended unless it succeeded."""
        commits = (self.count_commits() - commits_before) if self.count_commits else 0
        output = trace.render()
        if ending is not None:
            output = f"{output}\n\n{ending}".lstrip()
        return await self.lifecycle.notes.save(task_id, agent=self.agent, output=output, turns=trace.turns, commits=commits)
