"""`A2aHandler`: the A2A methods on the bot. A message is a turn (`start_turn`) in the session its context id names,
run as a task this process keeps in memory (`Tasks`); an approval is the task's input-required state."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from agentloop._names import is_message_id, new_id
from agentloop.context import IncomingMessage
from agentloop.scopes import approval_scope
from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.protocols.a2a.parts import agent_message, decision, message_text_of, progress, stamped, status_of
from agentloop.serve.requests import api_error, message_text
from agentloop.serve.server import Server
from agentloop.serve.turns import StartedTurn, start_turn

CALLER = "agentloop.caller"
"""Where a request's `Caller` (its token's user and tenant) is kept: in the request's scope and the call's state."""
MAX_TASKS = 1000
"""How many tasks a server keeps for `GetTask`; past it the oldest finished ones are forgotten."""
TERMINAL = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED})
"""The states a task does not leave."""
_Queue = asyncio.Queue[Event | None]


@attrs.define
class Record:
    """A task as this server keeps it: the A2A `Task` (kept current as its turn runs), the tool call it awaits
    approval for, and the queue its sender's stream reads (None ends it)."""

    task: Task
    approval_id: str | None = None
    queue: _Queue = attrs.Factory(asyncio.Queue)
    streamed: bool = False

    @property
    def state(self) -> TaskState:
        return self.task.status.state


@attrs.define
class Tasks:
    """The tasks of this server by id, at most `MAX_TASKS` (the oldest finished one goes first), and the ids of
    each context's tasks in order, so finding the one awaiting a decision reads one context's, not all."""

    records: OrderedDict[str, Record] = attrs.Factory(OrderedDict)
    contexts: dict[str, list[str]] = attrs.Factory(dict)

    def add(self, record: Record) -> None:
        self.records[record.task.id] = record
        self.contexts.setdefault(record.task.context_id, []).append(record.task.id)
        while len(self.records) > MAX_TASKS:
            done = next((key for key, kept in self.records.items() if kept.state in TERMINAL), None)
            self._forget(self.records.pop(done if done is not None else next(iter(self.records))))

    def _forget(self, record: Record) -> None:
        ids = self.contexts[record.task.context_id]
        ids.remove(record.task.id)
        if not ids:
            del self.contexts[record.task.context_id]

    def waiting(self, context_id: str) -> Record | None:
        """The newest task of the context that awaits the user's decision."""
        for task_id in reversed(self.contexts.get(context_id, ())):
            if self.records[task_id].state == TaskState.TASK_STATE_INPUT_REQUIRED:
                return self.records[task_id]
        return None


class A2aHandler(RequestHandler):
    """The A2A methods the dispatcher calls, for the caller in the call's state; every error is an A2A error."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.tasks = Tasks()

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        record = await self._begin(params.message, _caller(context))
        if not params.configuration.return_immediately:
            while await record.queue.get() is not None:
                pass
        return _shown(record.task, params.configuration.history_length if params.configuration.HasField("history_length") else None)

    async def on_message_send_stream(self, params: SendMessageRequest, context: ServerCallContext) -> AsyncGenerator[Event]:
        record = await self._begin(params.message, _caller(context))
        yield _shown(record.task, None)
        while (event := await record.queue.get()) is not None:
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        record = self._owned(params.id, _caller(context))
        return _shown(record.task, params.history_length if params.HasField("history_length") else None)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        """Cancel a task: one awaiting approval denies the call; a running turn goes on in its session, unseen by the task."""
        caller = _caller(context)
        record = self._owned(params.id, caller)
        if record.state in TERMINAL:
            raise TaskNotCancelableError(f"task {params.id!r} has already ended ({TaskState.Name(record.state)}); there is nothing to cancel")
        if record.state == TaskState.TASK_STATE_INPUT_REQUIRED and record.approval_id is not None:
            denial = IncomingMessage.approval(record.approval_id, approved=False, note="the caller cancelled the task")
            with _refusals():
                await (await start_turn(self.server, caller.session(record.task.context_id), denial, new_id())).outcome
        canceled = agent_message(record.task, "The task was cancelled.")
        record.task.status.CopyFrom(stamped(TaskStatus(state=TaskState.TASK_STATE_CANCELED, message=canceled)))
        record.queue.put_nowait(status_of(record.task))
        record.queue.put_nowait(None)
        return _shown(record.task, None)

    async def _begin(self, message: Message, caller: Caller) -> Record:
        """Start the turn of `message` as a task (new, or one awaiting the user's decision); refusals are raised here."""
        with _refusals():
            record, incoming = await self._task_for(message, caller)
            given = is_message_id(message.message_id) and incoming.decision is None  # a decision is a turn of its own
            started = await start_turn(
                self.server, caller.session(record.task.context_id), incoming, message.message_id if given else new_id(), given=given
            )
        user = Message()
        user.CopyFrom(message)
        user.context_id, user.task_id = record.task.context_id, record.task.id
        record.task.history.append(user)
        record.task.status.CopyFrom(stamped(TaskStatus(state=TaskState.TASK_STATE_WORKING)))
        record.queue, record.streamed, record.approval_id = asyncio.Queue(), False, None
        self.tasks.add(record)
        driver = asyncio.create_task(self._drive(record, started))
        self.server.turns.add(driver)
        driver.add_done_callback(self.server.turns.discard)
        return record

    async def _task_for(self, message: Message, caller: Caller) -> tuple[Record, IncomingMessage]:
        """The task `message` belongs to and what the bot receives: the decision on a waiting call, or the message."""
        if message.task_id:
            record = self._owned(message.task_id, caller)
            if record.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                raise UnsupportedOperationError(
                    f"task {message.task_id!r} is {TaskState.Name(record.state)}; send a new message in its context (contextId, no taskId)"
                )
            return record, await self._decided(record, message, caller)
        if message.context_id:
            if not self.server.tokens.owns(caller, message.context_id):
                raise TaskNotFoundError(f"there is no context {message.context_id!r} for this token; send a message without contextId to start one")
            waiting = self.tasks.waiting(message.context_id)
            chosen = None if waiting is None else decision(message)
            if waiting is not None and chosen is not None:
                return waiting, await self._decided(waiting, message, caller)
            return _new_task(message.context_id), IncomingMessage(message_text(self.server, message_text_of(message)))
        session_id = self.server.tokens.new_session_id(caller)
        return _new_task(session_id), IncomingMessage(message_text(self.server, message_text_of(message)))

    async def _decided(self, record: Record, message: Message, caller: Caller) -> IncomingMessage:
        """The user's decision in `message` on the call `record` awaits, while that call still waits."""
        chosen = decision(message)
        if chosen is None:
            raise InvalidParamsError("this task awaits the user's decision: answer approve or deny (text, or a data part {\"approve\": true})")
        session = caller.session(record.task.context_id)
        pending = await self.server.running.stores.approvals.pending(approval_scope(session), session.id)
        if record.approval_id is None or all(waiting.request.approval_id != record.approval_id for waiting in pending):
            raise InvalidParamsError(f"no tool call awaits approval in task {record.task.id!r}; it may have been decided already")
        approved, note = chosen
        return IncomingMessage.approval(record.approval_id, approved=approved, note=note)

    async def _drive(self, record: Record, started: StartedTurn) -> None:
        """Follow the turn: keep the task current and pass each update to the sender's stream, until the turn ends
        (or the task is cancelled: the turn then goes on unseen)."""
        queue = record.queue
        try:
            async for name, data in started.events:
                if record.state == TaskState.TASK_STATE_CANCELED:
                    return
                for event in progress(record, name, data):
                    queue.put_nowait(event)
        except Exception as error:
            failed = agent_message(record.task, api_error(error).message)
            record.task.status.CopyFrom(stamped(TaskStatus(state=TaskState.TASK_STATE_FAILED, message=failed)))
            queue.put_nowait(status_of(record.task))
        finally:
            queue.put_nowait(None)

    def _owned(self, task_id: str, caller: Caller) -> Record:
        """The caller's task `task_id`; another tenant's and an unknown one are not found alike."""
        record = self.tasks.records.get(task_id)
        if record is None or not self.server.tokens.owns(caller, record.task.context_id):
            raise TaskNotFoundError(f"there is no task {task_id!r} for this token (tasks are kept by the server that ran them, for a while)")
        return record

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        raise UnsupportedOperationError("ListTasks is not served; keep the ids of your tasks and ask GetTask")

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest, context: ServerCallContext) -> AsyncGenerator[Event]:
        raise UnsupportedOperationError("SubscribeToTask is not served; stream with SendStreamingMessage or poll GetTask")
        yield  # an async generator, as the interface declares

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError("push notifications are not served; stream or poll GetTask")

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError("push notifications are not served; stream or poll GetTask")

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError("push notifications are not served; stream or poll GetTask")

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError("push notifications are not served; stream or poll GetTask")

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest, context: ServerCallContext) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError("this agent has no extended card; read /.well-known/agent-card.json")


@contextmanager
def _refusals() -> Iterator[None]:
    """Any error but an A2A one as the A2A error a client is shown (an unexpected one logged, never shown)."""
    try:
        yield
    except A2AError:
        raise
    except Exception as error:
        raise as_a2a_error(api_error(error)) from error


def as_a2a_error(error: ApiError) -> A2AError:
    """A refusal as the A2A error of its kind; `data` keeps the native code and HTTP status (and Retry-After)."""
    kind: type[A2AError] = {404: TaskNotFoundError, 422: InvalidParamsError}.get(error.status, InvalidRequestError)
    if error.status >= 500:
        kind = InternalError
    data: dict[str, Any] = {"reason": error.code, "status": str(error.status)}
    if "Retry-After" in error.headers:
        data["retry_after"] = error.headers["Retry-After"]
    return kind(error.message, data=data)


def _new_task(context_id: str) -> Record:
    return Record(Task(id=new_id(), context_id=context_id, status=stamped(TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))))


def _caller(context: ServerCallContext) -> Caller:
    caller: Caller = context.state[CALLER]
    return caller


def _shown(task: Task, history_length: int | None) -> Task:
    """A copy of `task` to send, with its last `history_length` messages when the client asked for fewer."""
    shown = Task()
    shown.CopyFrom(task)
    if history_length is not None:
        kept = list(task.history)[-history_length:] if history_length else []
        del shown.history[:]
        shown.history.extend(kept)
    return shown
