"""The task lifecycle and running one attempt of a task with its notes.

    incoming → claimed → provisional → done      (accept: notes removed)
                 │           └──────→ incoming   (reject: notes kept for the retry)
                 ├──────────────────→ incoming   (release after a failed attempt)
                 ├──────────────────→ done       (complete directly: notes removed)
                 └──────────────────→ failed     (give up; notes kept)

Notes are removed only when a task reaches done; every other move keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs
import structlog

from agentloop.errors import InvalidTaskTransition, TaskError, UnknownTaskError
from agentloop.ports.clock import Clock, SystemClock
from agentloop.ports.tasks import TaskRecord, TaskState, TaskStore
from agentloop.tasks.attempt_notes import AttemptNotes, validate_task_id
from agentloop.tasks.evaluator import Evaluator, TaskTrace
from agentloop.tasks.results import TaskResult

_log = structlog.get_logger("agentloop.tasks")

_I, _C, _P, _D, _F = (
    TaskState.INCOMING,
    TaskState.CLAIMED,
    TaskState.PROVISIONAL,
    TaskState.DONE,
    TaskState.FAILED,
)


class TaskLifecycle:
    """Moves tasks between states in a `TaskStore` and keeps their attempt notes in step."""

    def __init__(self, store: TaskStore, notes: AttemptNotes, *, clock: Clock | None = None) -> None:
        self.store = store
        self.notes = notes
        self.clock: Clock = clock or SystemClock()

    def create(self, task_id: str, template: str, inputs: Mapping[str, str] | None = None) -> TaskRecord:
        """A new incoming task that will run `template` with `inputs`."""
        validate_task_id(task_id)
        now = self.clock.now()
        record = TaskRecord(task_id, template, dict(inputs or {}), _I, now, now)
        self.store.add(record)
        _log.info("task.created", task_id=task_id, template=template)
        return record

    def get(self, task_id: str) -> TaskRecord:
        record = self.store.get(validate_task_id(task_id))
        if record is None:
            raise UnknownTaskError(task_id)
        return record

    def claim(self, task_id: str, agent: str) -> TaskRecord:
        return self._move(task_id, (_I,), _C, claimed_by=agent, count_attempt=True)

    def claim_next(self, agent: str) -> TaskRecord | None:
        """Claim the oldest incoming task, or None if there is none."""
        for record in self.store.in_state(_I):
            moved = self.store.move(
                record.id, (_I,), _C, updated_at=self.clock.now(), claimed_by=agent, count_attempt=True
            )
            if moved is not None:
                return moved
        return None

    def submit(self, task_id: str) -> TaskRecord:
        """The attempt produced a result; it waits for acceptance."""
        return self._move(task_id, (_C,), _P)

    def release(self, task_id: str) -> TaskRecord:
        """The attempt failed; the task goes back to incoming with its notes."""
        return self._move(task_id, (_C,), _I)

    def reject(self, task_id: str) -> TaskRecord:
        """The provisional result was not good enough; retry, keeping the notes."""
        return self._move(task_id, (_P,), _I)

    def accept(self, task_id: str) -> TaskRecord:
        """The provisional result is accepted: done, and the notes are removed."""
        record = self._move(task_id, (_P,), _D)
        self.notes.remove(task_id)
        return record

    def complete(self, task_id: str) -> TaskRecord:
        """Finish a claimed task directly: done, and the notes are removed."""
        record = self._move(task_id, (_C,), _D)
        self.notes.remove(task_id)
        return record

    def fail(self, task_id: str) -> TaskRecord:
        """Give up on the task; its notes stay for whoever looks at it."""
        return self._move(task_id, (_I, _C, _P), _F)

    def _move(
        self,
        task_id: str,
        allowed: tuple[TaskState, ...],
        to: TaskState,
        *,
        claimed_by: str | None = None,
        count_attempt: bool = False,
    ) -> TaskRecord:
        current = self.get(task_id)
        moved = self.store.move(
            task_id, allowed, to, updated_at=self.clock.now(), claimed_by=claimed_by, count_attempt=count_attempt
        )
        if moved is None:
            latest = self.store.get(task_id) or current
            raise InvalidTaskTransition(task_id, latest.state.value, to.value, tuple(s.value for s in allowed))
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
    then the exception propagates). `count_commits`, if given, is called before and after the attempt and
    the difference is recorded as its commits.
    """

    def __init__(
        self,
        lifecycle: TaskLifecycle,
        evaluator: Evaluator,
        *,
        agent: str,
        count_commits: Callable[[], int] | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.evaluator = evaluator
        self.agent = agent
        self.count_commits = count_commits

    async def run(self, task_id: str) -> AttemptOutcome:
        """Run the task once; an unknown template raises before the task is claimed."""
        self.evaluator.registry.get(self.lifecycle.get(task_id).template)
        record = self.lifecycle.claim(task_id, self.agent)
        notes = self.lifecycle.notes
        commits_before = self.count_commits() if self.count_commits else 0
        trace = TaskTrace()
        result: TaskResult | None = None
        error: TaskError | None = None
        try:
            result = await self.evaluator.run(
                record.template, record.inputs, previous_notes=notes.read(task_id), trace=trace
            )
        except TaskError as exc:
            error = exc
        except BaseException as exc:
            # A bug, a cancellation or an interrupt: the attempt still leaves its notes and
            # the task goes back to incoming instead of staying claimed forever.
            try:
                detail = f": {exc}" if str(exc) else ""
                self._save(task_id, trace, commits_before, f"ABORTED ({type(exc).__name__}){detail}")
            finally:
                self.lifecycle.release(task_id)
            raise
        attempt = self._save(task_id, trace, commits_before, None if error is None else f"FAILED: {error}")
        moved = self.lifecycle.release(task_id) if error is not None else self.lifecycle.submit(task_id)
        return AttemptOutcome(task_id, attempt, moved.state, result, error)

    def _save(self, task_id: str, trace: TaskTrace, commits_before: int, ending: str | None) -> int:
        """Append the attempt's notes: what it answered, then how it ended unless it succeeded."""
        commits = (self.count_commits() - commits_before) if self.count_commits else 0
        output = trace.render()
        if ending is not None:
            output = f"{output}\n\n{ending}".lstrip()
        return self.lifecycle.notes.save(task_id, agent=self.agent, output=output, turns=trace.turns, commits=commits)
